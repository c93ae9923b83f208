"""Engine answers to Anthropic ``message`` bodies: content blocks, stop reason and usage.

A message's content is its blocks in the order the answer wrote them: a ``thinking`` block
when a reasoning model thought, its ``text``, then one ``tool_use`` block per call. A call that
``max_tokens`` cut short is kept as a ``tool_use`` block with the input written so far (and
the stop reason ``max_tokens``), as Anthropic returns an incomplete call.

Thinking blocks carry a ``signature``, which Anthropic uses to check, when a conversation sends
a thinking block back, that Claude wrote it. Nothing here checks one (a local model's thinking
can be edited by whoever holds it), so every block carries the same marker; clients need only
keep it, and may send blocks back with any signature.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from ...client import CallResult
from ...engine import Usage
from ...tools import parse_partial_json

__all__ = [
    "SIGNATURE",
    "MessageShape",
    "answer_finish",
    "stop_reason",
    "thinking_block",
    "tool_use_block",
    "usage_body",
]

SIGNATURE = "llamacpp-integrations:unsigned"
"""The ``signature`` of every thinking block (see the module docstring)."""


def usage_body(usage: Usage) -> dict[str, Any]:
    """``usage`` as Anthropic counts it: ``input_tokens`` are the prompt tokens not read from
    the cache, ``cache_read_input_tokens`` those that were; thinking tokens are detailed."""
    body: dict[str, Any] = {
        "input_tokens": usage.prompt_tokens - usage.cached_prompt_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_prompt_tokens,
        "output_tokens": usage.completion_tokens,
    }
    if usage.reasoning_tokens:
        body["output_tokens_details"] = {"thinking_tokens": usage.reasoning_tokens}
    return body


def answer_finish(finish: str | None, *, calls: bool, cut_calls: bool) -> str | None:
    """How an answer ended, as ``CallResult.finish_reason`` says it: ``length`` when a call
    was cut short, ``tool_calls`` when it called tools, else the engine's reason."""
    if cut_calls:
        return "length"
    return "tool_calls" if calls else finish


def stop_reason(finish: str | None, stop_sequence: str | None) -> str:
    """Anthropic's stop reason for how an answer ended (``answer_finish``)."""
    if finish == "tool_calls":
        return "tool_use"
    if finish == "length":
        return "max_tokens"
    return "stop_sequence" if stop_sequence is not None else "end_turn"


def thinking_block(thinking: str) -> dict[str, Any]:
    """A whole thinking block, signed with the marker."""
    return {"type": "thinking", "thinking": thinking, "signature": SIGNATURE}


def tool_use_block(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A whole ``tool_use`` block."""
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def _cut_input(arguments: str) -> dict[str, Any]:
    """The input a cut call had written, read leniently (``{}`` before its first value)."""
    try:
        value = parse_partial_json(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class MessageShape:
    """What every body of one message repeats: its id and model; whether thinking text is
    shown (``display: omitted`` shows blocks without it)."""

    id: str
    model: str
    show_thinking: bool = True

    @classmethod
    def new(cls, model: str, *, show_thinking: bool) -> MessageShape:
        """The shape of a new message (a fresh ``msg_`` id)."""
        return cls(f"msg_{uuid.uuid4().hex[:24]}", model, show_thinking)

    def head(self) -> dict[str, Any]:
        """The fields every message body starts with."""
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model}

    def whole(self, result: CallResult) -> dict[str, Any]:
        """The body of a whole answer."""
        content: list[dict[str, Any]] = []
        if result.reasoning:
            content.append(thinking_block(result.reasoning if self.show_thinking else ""))
        if result.content:
            content.append({"type": "text", "text": result.content})
        for call in result.tool_calls:
            content.append(tool_use_block(call.id, call.name, call.arguments))
        for cut in result.invalid_calls:
            if cut.name is not None:
                content.append(tool_use_block(cut.id, cut.name, _cut_input(cut.arguments)))
        finish = result.finish_reason
        stop_sequence = result.completion.stop_string if finish == "stop" else None
        return self.head() | {
            "content": content,
            "stop_reason": stop_reason(finish, stop_sequence),
            "stop_sequence": stop_sequence,
            "usage": usage_body(result.completion.usage),
        }
