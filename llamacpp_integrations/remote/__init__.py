"""Engines on llama.cpp's llama-server: one server or a fleet of them."""
