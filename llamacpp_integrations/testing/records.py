"""What an engine answered, as JSON and back: model info, completions, stream chunks, errors.

Written values leave out what a replay gives anew (a chunk's ``request_id`` is the replayed
request's own) and what is at its default (a chunk with no log-probabilities has no
``logprobs`` key), so a cassette line shows what the model did. Floats are written by ``json``
as their shortest repr, which reads back to the same float.

An error is written as its class name, message and attributes. It is read back as the same
class of ``llamacpp_integrations.errors`` (or a built-in exception) with the same message and
attributes, without calling its constructor, which may reword the message.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Mapping
from typing import Any, cast

from .. import errors
from ..engine.machine import Placement
from ..engine.results import (
    Completion,
    FinishReason,
    ModelInfo,
    StreamChunk,
    Timings,
    TokenLogprob,
    TopLogprob,
    Usage,
)

__all__ = [
    "chunk_from_json",
    "chunk_to_json",
    "completion_from_json",
    "completion_to_json",
    "error_from_json",
    "error_to_json",
    "model_info_from_json",
    "model_info_to_json",
]

JSON = dict[str, Any]


# ---- model info ------------------------------------------------------------------------------


def model_info_to_json(info: ModelInfo) -> JSON:
    return dataclasses.asdict(info)


def model_info_from_json(data: Mapping[str, Any]) -> ModelInfo:
    """``ModelInfo`` from a header; fields a later version added and this one lacks are
    dropped, fields this version added and the cassette lacks take their defaults."""
    known = {f.name for f in dataclasses.fields(ModelInfo)}
    values = {key: value for key, value in data.items() if key in known}
    if isinstance(values.get("placement"), Mapping):
        values["placement"] = Placement(**values["placement"])
    return ModelInfo(**values)


# ---- usage, timings, log-probabilities --------------------------------------------------------


def _usage_from(data: Mapping[str, Any]) -> Usage:
    return Usage(**data)


def _timings_from(data: Mapping[str, Any]) -> Timings:
    return Timings(**data)


def _top_to(top: TopLogprob) -> JSON:
    return {
        "token": top.token,
        "id": top.token_id,
        "logprob": top.logprob,
        "bytes": list(top.bytes),
    }


def _top_from(data: Mapping[str, Any]) -> TopLogprob:
    return TopLogprob(data["token"], data["id"], data["logprob"], tuple(data["bytes"]))


def _logprob_to(token: TokenLogprob) -> JSON:
    out = _top_to(TopLogprob(token.token, token.token_id, token.logprob, token.bytes))
    if token.top:
        out["top"] = [_top_to(top) for top in token.top]
    return out


def _logprob_from(data: Mapping[str, Any]) -> TokenLogprob:
    top = tuple(_top_from(item) for item in data.get("top", ()))
    return TokenLogprob(data["token"], data["id"], data["logprob"], tuple(data["bytes"]), top)


# ---- chunks and completions ---------------------------------------------------------------------


def chunk_to_json(chunk: StreamChunk, at: float) -> JSON:
    """One chunk as delivered, ``at`` seconds after the request was made."""
    out: JSON = {"at": round(at, 4), "text": chunk.text}
    if chunk.reasoning:
        out["reasoning"] = chunk.reasoning
    if chunk.token_ids:
        out["token_ids"] = list(chunk.token_ids)
    if chunk.logprobs:
        out["logprobs"] = [_logprob_to(token) for token in chunk.logprobs]
    if chunk.finish_reason is not None:
        out["finish_reason"] = chunk.finish_reason
    if chunk.usage is not None:
        out["usage"] = dataclasses.asdict(chunk.usage)
    if chunk.timings is not None:
        out["timings"] = dataclasses.asdict(chunk.timings)
    if chunk.stop_string is not None:
        out["stop_string"] = chunk.stop_string
    return out


def chunk_from_json(data: Mapping[str, Any], request_id: str) -> StreamChunk:
    """A recorded chunk, as ``request_id``'s."""
    usage, timings = data.get("usage"), data.get("timings")
    return StreamChunk(
        request_id,
        data["text"],
        tuple(data.get("token_ids", ())),
        finish_reason=cast(FinishReason | None, data.get("finish_reason")),
        usage=_usage_from(usage) if usage is not None else None,
        timings=_timings_from(timings) if timings is not None else None,
        logprobs=tuple(_logprob_from(item) for item in data.get("logprobs", ())),
        reasoning=data.get("reasoning", ""),
        stop_string=data.get("stop_string"),
    )


def completion_to_json(completion: Completion) -> JSON:
    out: JSON = {
        "text": completion.text,
        "reasoning": completion.reasoning,
        "token_ids": list(completion.token_ids),
        "finish_reason": completion.finish_reason,
        "usage": dataclasses.asdict(completion.usage),
        "timings": dataclasses.asdict(completion.timings),
    }
    if completion.logprobs is not None:
        out["logprobs"] = [_logprob_to(token) for token in completion.logprobs]
    if completion.stop_string is not None:
        out["stop_string"] = completion.stop_string
    return out


def completion_from_json(data: Mapping[str, Any], request_id: str) -> Completion:
    """A recorded completion, as ``request_id``'s."""
    logprobs = data.get("logprobs")
    return Completion(
        request_id,
        data["text"],
        tuple(data["token_ids"]),
        cast(FinishReason, data["finish_reason"]),
        _usage_from(data["usage"]),
        _timings_from(data["timings"]),
        tuple(_logprob_from(item) for item in logprobs) if logprobs is not None else None,
        reasoning=data.get("reasoning", ""),
        stop_string=data.get("stop_string"),
    )


# ---- errors -------------------------------------------------------------------------------------


def error_to_json(error: BaseException) -> JSON:
    """The class, message and JSON-able attributes of ``error`` (never its request id)."""
    attributes = {
        name: value
        for name, value in vars(error).items()
        if name != "request_id" and _is_json(value)
    }
    return {"type": type(error).__name__, "message": str(error), "attributes": attributes}


def error_from_json(data: Mapping[str, Any], request_id: str | None) -> Exception:
    """The recorded error, raised anew for ``request_id`` (``None``: a call with no id)."""
    name = data["type"]
    found = getattr(errors, name, None) or getattr(builtins, name, None)
    if not (isinstance(found, type) and issubclass(found, Exception)):
        # A class from a library (an httpx error, say): the nearest thing that says so.
        found = errors.EngineError
    error = found.__new__(found)
    Exception.__init__(error, data["message"])
    for attribute, value in data.get("attributes", {}).items():
        setattr(error, attribute, value)
    if isinstance(error, errors.LlamaCppIntegrationError):
        error.request_id = request_id
    if isinstance(error, errors.EngineError) and not hasattr(error, "partial_text"):
        error.partial_text = ""
    if found is errors.EngineError and name != "EngineError":
        error.args = (f"{name}: {data['message']}",)
    return error


def _is_json(value: Any) -> bool:
    if isinstance(value, str | int | float | bool) or value is None:
        return True
    if isinstance(value, list | tuple):
        return all(_is_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _is_json(item) for key, item in value.items())
    return False
