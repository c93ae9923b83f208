"""Conformance: the real chat templates of the model families llama.cpp supports, rendered
(``test_render.py``, pure) and run as a user meets them (``checks.py``, on a real model)."""
