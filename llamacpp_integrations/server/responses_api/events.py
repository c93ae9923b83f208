"""A streamed Responses answer as OpenAI's named events, each with its ``sequence_number``.

The stream opens with ``response.created`` and ``response.in_progress``; then each output item
is opened (``response.output_item.added``, and for text its ``response.content_part.added``),
filled with deltas (``response.reasoning_text.delta``, ``response.output_text.delta``,
``response.function_call_arguments.delta``) and closed (the matching ``.done`` events, then
``response.output_item.done``) before the next one opens; it ends with ``response.completed``
(or ``response.incomplete`` when ``max_output_tokens`` cut it) carrying the whole response,
made of exactly the items streamed. An error after the stream began is an ``error`` event, and
nothing follows it (no ``[DONE]``: the Responses API has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ...tools import ToolCallDelta, ToolStreamChunk
from ..errors import ApiError
from ..exchange import WireShape
from ..streaming import named_sse
from .bodies import (
    ItemStatus,
    ResponseFrame,
    function_call_item,
    message_item,
    new_item_id,
    output_text_part,
    reasoning_item,
)

__all__ = ["RESPONSES_SHAPE", "ResponseEvents", "error_event"]

ItemKind = Literal["reasoning", "message", "function_call"]


def error_event(error: ApiError, sequence_number: int) -> bytes:
    """The ``error`` event of a stream that already began."""
    body = {
        "type": "error",
        "code": error.code,
        "message": error.message,
        "param": error.param,
        "sequence_number": sequence_number,
    }
    return named_sse("error", body)


RESPONSES_SHAPE = WireShape(ApiError.body, lambda error: error_event(error, 0), None)
"""The Responses API's errors: OpenAI's JSON body before a stream begins (a stream numbers its
own error event, see ``ResponseEvents.shape``)."""


@dataclass
class _Item:
    """An output item being streamed: its kind, ids, place in ``output`` and text so far
    (reasoning, answer text, or a call's arguments)."""

    kind: ItemKind
    id: str
    index: int
    text: str = ""
    call_id: str = ""
    name: str = ""
    status: ItemStatus = "in_progress"

    def body(self, *, opened: bool = False) -> dict[str, Any]:
        text = None if opened else self.text
        if self.kind == "reasoning":
            return reasoning_item(self.id, text, self.status)
        if self.kind == "message":
            return message_item(self.id, text, self.status)
        return function_call_item(self.id, self.call_id, self.name, text or "", self.status)


class ResponseEvents:
    """Every event of one streamed response, numbered as they are made."""

    def __init__(self, frame: ResponseFrame) -> None:
        self.frame = frame
        self._sequence = 0
        self._items: list[_Item] = []  # the response's output so far
        self._open: _Item | None = None  # the item being filled (one at a time)
        self._calls: dict[int, _Item] = {}  # a call's index in the answer -> its item

    def _event(self, kind: str, body: dict[str, Any]) -> bytes:
        event = named_sse(kind, {"type": kind, **body, "sequence_number": self._sequence})
        self._sequence += 1
        return event

    def shape(self) -> WireShape:
        """This stream's errors: its ``error`` event takes the next sequence number."""

        def numbered(error: ApiError) -> bytes:
            event = error_event(error, self._sequence)
            self._sequence += 1
            return event

        return WireShape(ApiError.body, numbered, None)

    def opening(self) -> list[bytes]:
        """``response.created`` and ``response.in_progress``."""
        response = self.frame.body("in_progress", [])
        return [
            self._event("response.created", {"response": response}),
            self._event("response.in_progress", {"response": response}),
        ]

    # ---- items ------------------------------------------------------------------------------

    def _where(self, item: _Item) -> dict[str, Any]:
        return {"item_id": item.id, "output_index": item.index}

    def _open_item(
        self, kind: ItemKind, prefix: str, call_id: str = "", name: str = ""
    ) -> tuple[_Item, list[bytes]]:
        events = self._close()
        item = _Item(kind, new_item_id(prefix), len(self._items), call_id=call_id, name=name)
        self._items.append(item)
        self._open = item
        events.append(
            self._event(
                "response.output_item.added",
                {"output_index": item.index, "item": item.body(opened=True)},
            )
        )
        if kind == "reasoning":
            part = {"type": "reasoning_text", "text": ""}
        elif kind == "message":
            part = output_text_part("")
        else:
            return item, events
        added = {**self._where(item), "content_index": 0, "part": part}
        events.append(self._event("response.content_part.added", added))
        return item, events

    def _close(self, status: ItemStatus = "completed") -> list[bytes]:
        """The events that close the open item (none if no item is open)."""
        item, self._open = self._open, None
        if item is None:
            return []
        item.status = status
        where = self._where(item)
        events = []
        if item.kind == "function_call":
            done = {**where, "name": item.name, "arguments": item.text}
            events.append(self._event("response.function_call_arguments.done", done))
        else:
            if item.kind == "reasoning":
                kind, part = "response.reasoning_text.done", {"type": "reasoning_text"}
            else:
                kind, part = "response.output_text.done", output_text_part("")
            text = {**where, "content_index": 0, "text": item.text}
            if item.kind == "message":
                text["logprobs"] = []
            events.append(self._event(kind, text))
            whole_part = {**part, "text": item.text}
            done = {**where, "content_index": 0, "part": whole_part}
            events.append(self._event("response.content_part.done", done))
        body = {"output_index": item.index, "item": item.body()}
        events.append(self._event("response.output_item.done", body))
        return events

    def _text(self, kind: Literal["reasoning", "message"], delta: str) -> list[bytes]:
        events: list[bytes] = []
        item = self._open
        if item is None or item.kind != kind:
            item, events = self._open_item(kind, "rs" if kind == "reasoning" else "msg")
        item.text += delta
        body = {**self._where(item), "content_index": 0, "delta": delta}
        if kind == "message":
            body["logprobs"] = []
            events.append(self._event("response.output_text.delta", body))
        else:
            events.append(self._event("response.reasoning_text.delta", body))
        return events

    def _call(self, delta: ToolCallDelta) -> list[bytes]:
        events: list[bytes] = []
        item = self._calls.get(delta.index)
        if item is None:  # a call's first delta names it
            item, events = self._open_item(
                "function_call", "fc", call_id=delta.id or "", name=delta.name or ""
            )
            self._calls[delta.index] = item
        if delta.arguments:
            item.text += delta.arguments
            body = {**self._where(item), "delta": delta.arguments}
            events.append(self._event("response.function_call_arguments.delta", body))
        return events

    # ---- pieces -----------------------------------------------------------------------------

    def piece(self, piece: ToolStreamChunk) -> list[bytes]:
        """The events of the stream's next piece; the last piece's close the stream."""
        events: list[bytes] = []
        if piece.reasoning:
            events += self._text("reasoning", piece.reasoning)
        if piece.text:
            events += self._text("message", piece.text)
        for delta in piece.tool_call_deltas:
            events += self._call(delta)
        if piece.finish_reason is not None:
            events += self._finish(piece)
        return events

    def _finish(self, piece: ToolStreamChunk) -> list[bytes]:
        cut = piece.finish_reason == "length" or bool(piece.invalid_calls)
        events = self._close("incomplete" if cut else "completed")
        status: Literal["completed", "incomplete"] = "incomplete" if cut else "completed"
        response = self.frame.body(status, [item.body() for item in self._items], piece.usage)
        events.append(self._event(f"response.{status}", {"response": response}))
        return events
