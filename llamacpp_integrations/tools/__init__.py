"""Structured output helpers: JSON schema -> GBNF grammars for constrained generation."""

from __future__ import annotations

from .json_grammar import any_json_gbnf, json_object_gbnf, schema_to_gbnf

__all__ = ["any_json_gbnf", "json_object_gbnf", "schema_to_gbnf"]
