"""The affinity key of a request: the part of its prompt that many requests share.

A fleet sends requests with one key to one server, so the server's prompt cache (llama-server
reuses the longest cached prefix of a slot) keeps hitting. For a chat that shared part is what
the template renders first: the leading system (or developer) messages and the tools block.
The key is built from exactly those inputs, with the template and its variables, as canonical
JSON: it groups requests as their rendered prefix would, without rendering a template per
request (and without failing on templates that refuse a conversation of system messages
only). A chat with neither gets the key of the empty prefix: the template's own preamble (a
default system prompt, say) is still shared.

A raw completion is keyed on the first ``PREFIX_CHARS`` characters (or ``PREFIX_TOKENS`` token
ids) of its prompt.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..engine.types import ChatMessage, ChatRequest, CompletionRequest, GenerationRequest
from ..prompts.media import ImageInput

__all__ = ["PREFIX_CHARS", "PREFIX_TOKENS", "affinity_key"]

PREFIX_CHARS = 512
PREFIX_TOKENS = 128
SYSTEM_ROLES = frozenset({"system", "developer"})


def affinity_key(request: GenerationRequest) -> str | None:
    """The routing key of ``request`` (``None`` for a kind of request with no shared prefix)."""
    if isinstance(request, ChatRequest):
        leading: list[Any] = []
        for message in request.messages:
            as_dict = _message_dict(message)
            if as_dict.get("role") not in SYSTEM_ROLES:
                break
            leading.append(as_dict)
        return "chat:" + _canonical(
            {
                "system": leading,
                "tools": request.tools or [],
                "template": request.chat_template,
                "template_kwargs": dict(request.template_kwargs),
            }
        )
    if isinstance(request, CompletionRequest):
        if isinstance(request.prompt, str):
            return "text:" + request.prompt[:PREFIX_CHARS]
        return "tokens:" + ",".join(str(t) for t in list(request.prompt)[:PREFIX_TOKENS])
    return None


def _message_dict(message: ChatMessage | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(message, ChatMessage):
        return message.to_template_dict()
    return dict(message)


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=_json_default)


def _json_default(value: object) -> object:
    if isinstance(value, ImageInput):  # the pixels decide what the server caches
        digest = hashlib.blake2b(value.rgb, digest_size=8).hexdigest()
        return f"image:{value.width}x{value.height}:{digest}"
    if isinstance(value, ChatMessage):
        return value.to_template_dict()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple | list):
        return list(value)
    return repr(value)
