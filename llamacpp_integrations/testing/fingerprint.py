"""What identifies a request in a cassette: its fingerprint, a plain JSON value.

Two requests that must get the same answer have equal fingerprints, and nothing that changes
from run to run is in one: a request's ``request_id`` and ``timeout`` are left out, image pixels
are reduced to a hash, and the tool-call ids the package makes up (``call_`` and 24 random hex
digits, carried back in the next turn's messages) become ``call_1``, ``call_2``... in the order
they first appear. Everything else that can change the answer is in: the messages (or the prompt
text or token ids), tools, template and its variables, sampling, ``max_tokens``, stop strings,
grammar and its triggers, log-probabilities, reasoning, ``special`` and ``ignore_eos``, and
the LoRA adapters it asks for (``lora``; left out when it names none, so the engine's defaults
apply, as cassettes recorded before requests could choose adapters have it).

Mappings come out with sorted keys and sequences as lists, so a fingerprint compares (and is
written) the same however the caller built the request.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..engine.types import ChatMessage, ChatRequest, CompletionRequest, GenerationRequest
from ..prompts.media import ImageInput

__all__ = [
    "Fingerprint",
    "chat_prompt_fingerprint",
    "generation_fingerprint",
    "plain",
]

Fingerprint = dict[str, Any]

# The ids ``tools.tool_spec.new_tool_call_id`` makes: random, so a replayed run has new ones.
_TOOL_CALL_ID = re.compile(r"call_[0-9a-f]{24}")
# Fields of GenerationRequest a fingerprint never holds: they change, the answer does not.
_NOT_THE_ANSWER = frozenset({"request_id", "timeout"})


def plain(value: Any) -> Any:
    """``value`` as JSON data: dataclasses and mappings to dicts with sorted string keys, other
    sequences to lists, bytes and images to a SHA-256 of their content, non-finite floats to
    strings (JSON has none)."""
    if isinstance(value, ImageInput):
        digest = hashlib.sha256(value.rgb).hexdigest()
        return {"height": value.height, "sha256": digest, "width": value.width}
    if isinstance(value, ChatMessage):
        return plain(value.to_template_dict())
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return plain(fields)
    if isinstance(value, bytes | bytearray):
        return {"sha256": hashlib.sha256(bytes(value)).hexdigest()}
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in sorted(value.items(), key=_key_order)}
    if isinstance(value, str | int | bool) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Sequence | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [plain(item) for item in items]
    return repr(value)


def _key_order(item: tuple[Any, Any]) -> str:
    return str(item[0])


def chat_prompt_fingerprint(request: ChatRequest) -> Fingerprint:
    """What of a chat request reaches its template: messages, tools, template, variables."""
    prompt = {
        "add_generation_prompt": request.add_generation_prompt,
        "chat_template": request.chat_template,
        "messages": plain(list(request.messages)),
        "template_kwargs": plain(request.template_kwargs),
        "tools": plain(request.tools),
    }
    renamed: dict[str, str] = {}
    return {"chat": _rename_call_ids(prompt, renamed)}


def completion_prompt_fingerprint(request: CompletionRequest) -> Fingerprint:
    """What of a raw completion reaches the model: its text or ids, BOS, images."""
    prompt = request.prompt
    text: dict[str, Any] = (
        {"text": prompt} if isinstance(prompt, str) else {"token_ids": list(prompt)}
    )
    return {"completion": {**text, "add_bos": request.add_bos, "images": plain(request.images)}}


def prompt_fingerprint(request: ChatRequest | CompletionRequest) -> Fingerprint:
    """The prompt part of a request's fingerprint (chat or raw)."""
    if isinstance(request, ChatRequest):
        return chat_prompt_fingerprint(request)
    return completion_prompt_fingerprint(request)


def generation_fingerprint(request: GenerationRequest) -> Fingerprint:
    """The whole fingerprint of a generation request: its prompt and how it is generated."""
    if not isinstance(request, ChatRequest | CompletionRequest):
        raise TypeError(f"cannot fingerprint a {type(request).__name__}: not a chat or completion")
    common = {
        f.name: plain(getattr(request, f.name))
        for f in dataclasses.fields(GenerationRequest)
        if f.name not in _NOT_THE_ANSWER
    }
    # Speculation changes how fast the answer comes, never what it is (engine/speculation).
    common["sampling"].pop("allow_speculation", None)
    if common["lora"] is None:
        del common["lora"]
    return {**common, "prompt": prompt_fingerprint(request)}


def _rename_call_ids(value: Any, renamed: dict[str, str]) -> Any:
    """``value`` with every generated tool-call id replaced by its order of appearance."""
    if isinstance(value, str):
        return _TOOL_CALL_ID.sub(lambda match: _rename(match.group(0), renamed), value)
    if isinstance(value, dict):
        return {key: _rename_call_ids(item, renamed) for key, item in value.items()}
    if isinstance(value, list):
        return [_rename_call_ids(item, renamed) for item in value]
    return value


def _rename(call_id: str, renamed: dict[str, str]) -> str:
    return renamed.setdefault(call_id, f"call_{len(renamed) + 1}")
