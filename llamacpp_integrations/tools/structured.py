"""Structured output: answers constrained by a grammar built from a JSON schema, then parsed.

The grammar makes every finished answer valid JSON that conforms to the schema; the only way to
get something else is running out of tokens, which raises ``OutputTruncatedError`` instead of
returning a broken document. ``constrain`` plans the request, ``read_structured`` reads the
answer; running it is the caller's (``client`` runs plans on any engine).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..engine import ChatRequest, Completion, CompletionRequest
from ..errors import EngineError, OutputTruncatedError
from .grammar import json_object_gbnf, schema_to_gbnf
from .reasoning_grammar import answer_grammar

__all__ = ["StructuredResult", "constrain", "read_structured"]

Request = ChatRequest | CompletionRequest


@dataclass(frozen=True)
class StructuredResult:
    """The parsed value and the completion it came from."""

    value: Any
    completion: Completion


def constrain(request: Request, schema: Mapping[str, Any] | None) -> Request:
    """The request with its grammar set from ``schema`` (``None``: any JSON object).

    Stop strings are dropped: the grammar decides where the answer ends, and a stop string met
    inside a JSON string would cut the document in half. A reasoning model (a request with
    ``reasoning`` set) thinks freely first; the JSON comes after its reasoning.
    """
    grammar = json_object_gbnf() if schema is None else schema_to_gbnf(schema)
    if request.reasoning is not None:
        grammar = answer_grammar(request.reasoning, grammar)
    return replace(request, grammar=grammar, stop=())


def read_structured(completion: Completion) -> StructuredResult:
    """The JSON value of a constrained answer.

    Raises:
        OutputTruncatedError: ``max_tokens`` ended the answer before the document was whole.
    """
    if completion.finish_reason == "length":
        raise OutputTruncatedError(
            f"max_tokens ({completion.usage.completion_tokens}) ended the JSON answer early",
            request_id=completion.request_id,
            partial_text=completion.text,
        )
    try:
        return StructuredResult(json.loads(completion.text), completion)
    except json.JSONDecodeError as error:  # the grammar rules this out; say so loudly if not
        raise EngineError(
            f"grammar-constrained output is not JSON ({error})",
            request_id=completion.request_id,
            partial_text=completion.text,
        ) from error
