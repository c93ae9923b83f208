"""Engine answers to Responses API bodies: the ``response`` object and its output items.

A response's ``output`` lists, in the order they were written, a ``reasoning`` item (a reasoning
model's thinking, in ``content`` as ``reasoning_text``: it is the thinking itself, so
``summary`` stays empty), a ``message`` item (the answer's text as ``output_text``) and one
``function_call`` item per call. An answer cut by ``max_output_tokens`` is ``incomplete``
(``incomplete_details.reason: "max_output_tokens"``), and so is its last item, which is where
the cut fell: a function call cut short keeps the arguments written so far.

The streamed events (``events``) build their items with the same functions, so a
stream's final response has the shapes of a whole one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ...client import CallOptions, CallResult
from ...engine import Usage
from .schemas import ResponsesBody

__all__ = [
    "ItemStatus",
    "ResponseFrame",
    "function_call_item",
    "message_item",
    "new_item_id",
    "reasoning_item",
    "response_frame",
    "responses_usage",
    "whole_response",
]

ItemStatus = Literal["in_progress", "completed", "incomplete"]


def new_item_id(prefix: str) -> str:
    """A fresh id for an output item (``msg``, ``rs``, ``fc``) or a response (``resp``)."""
    return f"{prefix}_{uuid.uuid4().hex}"


def responses_usage(usage: Usage) -> dict[str, Any]:
    """``usage`` in the Responses shape (cached prompt tokens, reasoning tokens)."""
    return {
        "input_tokens": usage.prompt_tokens,
        # Nothing is written to a prompt cache in OpenAI's sense; the field is required.
        "input_tokens_details": {
            "cached_tokens": usage.cached_prompt_tokens,
            "cache_write_tokens": 0,
        },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def reasoning_item(item_id: str, text: str | None, status: ItemStatus) -> dict[str, Any]:
    """A ``reasoning`` item; ``text=None`` for one just opened (no content part yet)."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "summary": [], "content": content, "status": status}


def output_text_part(text: str) -> dict[str, Any]:
    """A message's ``output_text`` content part."""
    return {"type": "output_text", "text": text, "annotations": []}


def message_item(item_id: str, text: str | None, status: ItemStatus) -> dict[str, Any]:
    """An assistant ``message`` item; ``text=None`` for one just opened."""
    content = [] if text is None else [output_text_part(text)]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: ItemStatus
) -> dict[str, Any]:
    """A ``function_call`` item (``arguments`` as JSON text, cut short when incomplete)."""
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


@dataclass(frozen=True)
class ResponseFrame:
    """What every ``response`` object of one answer repeats: its id, creation time, model,
    and the request's settings as OpenAI echoes them."""

    id: str
    created_at: int
    model: str
    echo: Mapping[str, Any]

    def body(
        self,
        status: Literal["in_progress", "completed", "incomplete"],
        output: list[dict[str, Any]],
        usage: Usage | None = None,
    ) -> dict[str, Any]:
        """The ``response`` object at ``status`` with ``output`` (and ``usage`` once done)."""
        done = status != "in_progress"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": int(time.time()) if status == "completed" else None,
            "status": status,
            "error": None,
            "incomplete_details": (
                {"reason": "max_output_tokens"} if status == "incomplete" else None
            ),
            "model": self.model,
            "output": output,
            "usage": responses_usage(usage) if done and usage is not None else None,
            **self.echo,
        }


def response_frame(body: ResponsesBody, options: CallOptions, model: str) -> ResponseFrame:
    """The frame of the answer to ``body``, run with ``options`` by ``model``."""
    text_format = body.text.format.echo() if body.text and body.text.format else {"type": "text"}
    reasoning = body.reasoning.model_dump(exclude_none=True) if body.reasoning else None
    echo = {
        "instructions": body.instructions,
        "metadata": body.metadata or {},
        "parallel_tool_calls": options.parallel_tool_calls,
        "temperature": options.sampling.temperature,
        "top_p": options.sampling.top_p,
        "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
        "tools": body.tools or [],
        "text": {"format": text_format, "verbosity": "medium"},
        "max_output_tokens": body.max_output_tokens,
        "previous_response_id": None,
        "reasoning": reasoning,
        "truncation": body.truncation or "disabled",
        "user": body.user,
        "background": False,
    }
    return ResponseFrame(new_item_id("resp"), int(time.time()), model, echo)


def whole_response(frame: ResponseFrame, result: CallResult) -> dict[str, Any]:
    """A whole answer as a ``response``: completed, or incomplete when it was cut."""
    output: list[dict[str, Any]] = []
    if result.reasoning:
        output.append(reasoning_item(new_item_id("rs"), result.reasoning, "completed"))
    if result.content:
        output.append(message_item(new_item_id("msg"), result.content, "completed"))
    for call in result.tool_calls:
        item = function_call_item(
            new_item_id("fc"), call.id, call.name, call.arguments_json, "completed"
        )
        output.append(item)
    # A call cut before its name was written has nothing to show: the status says it was cut.
    for cut in result.invalid_calls:
        if cut.name:
            item = function_call_item(
                new_item_id("fc"), cut.id, cut.name, cut.arguments, "completed"
            )
            output.append(item)
    incomplete = result.finish_reason == "length"
    if incomplete and output:
        output[-1]["status"] = "incomplete"  # the cut fell in the last item written
    status: Literal["completed", "incomplete"] = "incomplete" if incomplete else "completed"
    return frame.body(status, output, result.completion.usage)
