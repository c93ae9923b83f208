"""A streamed Anthropic message: the events of one answer, piece by piece.

The order is Anthropic's: ``message_start`` (the message with no content, and the prompt's
tokens), a ``ping``, then each content block in turn, ``content_block_start``, its deltas
(``thinking_delta``, ``text_delta``, ``input_json_delta``) and ``content_block_stop`` (a
thinking block's ``signature_delta`` just before it), then ``message_delta`` (the stop reason
and the whole usage) and ``message_stop``. One block is open at a time: a piece of another kind
closes it and opens the next, so the blocks come in the order the answer wrote them and the
SDK's accumulated message is the whole answer's ``MessageShape.whole``.
"""

from __future__ import annotations

from typing import Any

from ...tools import ToolCallDelta, ToolStreamChunk
from ..streaming import named_sse
from .bodies import (
    SIGNATURE,
    MessageShape,
    answer_finish,
    stop_reason,
    usage_body,
)

__all__ = ["MessageEvents"]


def _event(kind: str, **fields: Any) -> bytes:
    return named_sse(kind, {"type": kind, **fields})


class MessageEvents:
    """The events of one streamed message, made from its pieces in order."""

    def __init__(self, shape: MessageShape) -> None:
        self.shape = shape
        self._index = -1  # the last block opened
        self._open: str | None = None  # its kind while it is open
        self._calls: dict[int, int] = {}  # a call's index -> its block's

    def opening(self, input_tokens: int) -> list[bytes]:
        """``message_start`` (with the prompt's token count: which of them the cache held is
        told at the end) and a ``ping``."""
        usage = {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0,
        }
        message = self.shape.head() | {
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return [_event("message_start", message=message), _event("ping")]

    def piece(self, piece: ToolStreamChunk) -> list[bytes]:
        """The events of the next piece; the last one's end the message."""
        events: list[bytes] = []
        if piece.reasoning:
            self._into("thinking", {"type": "thinking", "thinking": "", "signature": ""}, events)
            if self.shape.show_thinking:
                delta = {"type": "thinking_delta", "thinking": piece.reasoning}
                events.append(self._delta(self._index, delta))
        if piece.text:
            self._into("text", {"type": "text", "text": ""}, events)
            events.append(self._delta(self._index, {"type": "text_delta", "text": piece.text}))
        for call in piece.tool_call_deltas:
            events += self._call(call)
        if piece.finish_reason is not None:
            self._close(events)
            events += self._ending(piece)
        return events

    def _call(self, delta: ToolCallDelta) -> list[bytes]:
        events: list[bytes] = []
        if delta.name is not None:  # a call's first piece opens its block
            block = {"type": "tool_use", "id": delta.id or "", "name": delta.name, "input": {}}
            self._start("tool_use", block, events)
            self._calls[delta.index] = self._index
        if delta.arguments:
            index = self._calls.get(delta.index, self._index)
            json_delta = {"type": "input_json_delta", "partial_json": delta.arguments}
            events.append(self._delta(index, json_delta))
        return events

    def _into(self, kind: str, block: dict[str, Any], events: list[bytes]) -> None:
        """Make sure a block of ``kind`` is the open one."""
        if self._open != kind:
            self._start(kind, block, events)

    def _start(self, kind: str, block: dict[str, Any], events: list[bytes]) -> None:
        self._close(events)
        self._index += 1
        self._open = kind
        events.append(_event("content_block_start", index=self._index, content_block=block))

    def _close(self, events: list[bytes]) -> None:
        if self._open is None:
            return
        if self._open == "thinking":
            signature = {"type": "signature_delta", "signature": SIGNATURE}
            events.append(self._delta(self._index, signature))
        events.append(_event("content_block_stop", index=self._index))
        self._open = None

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> bytes:
        return _event("content_block_delta", index=index, delta=delta)

    def _ending(self, piece: ToolStreamChunk) -> list[bytes]:
        finish = answer_finish(
            piece.finish_reason, calls=bool(piece.tool_calls), cut_calls=bool(piece.invalid_calls)
        )
        stop_sequence = piece.stop_string if finish == "stop" else None
        delta = {"stop_reason": stop_reason(finish, stop_sequence), "stop_sequence": stop_sequence}
        usage = usage_body(piece.usage) if piece.usage is not None else {"output_tokens": 0}
        return [_event("message_delta", delta=delta, usage=usage), _event("message_stop")]
