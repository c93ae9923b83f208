"""The turns of LlamaIndex's function-calling loop: a chat's arguments with tools, and a
response cut to its first call when parallel calls were not allowed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole

from .messages import tools_to_openai
from .responses import PartialToolCall, assistant_message, tool_selections

if TYPE_CHECKING:
    from llama_index.core.tools.types import BaseTool

__all__ = ["chat_with_tools_kwargs", "first_call_only"]


def chat_with_tools_kwargs(
    tools: Sequence[BaseTool],
    user_msg: str | ChatMessage | None,
    chat_history: list[ChatMessage] | None,
    *,
    allow_parallel_tool_calls: bool,
    tool_required: bool,
    tool_choice: object,
    **kwargs: Any,
) -> dict[str, Any]:
    """The ``chat`` keyword arguments of a turn offering ``tools`` (the history is copied)."""
    messages = list(chat_history or [])
    if isinstance(user_msg, str):
        messages.append(ChatMessage(role=MessageRole.USER, content=user_msg))
    elif user_msg is not None:
        messages.append(user_msg)
    if tool_choice is None or tool_choice == "auto":
        tool_choice = "required" if tool_required else "auto"
    prepared: dict[str, Any] = {"messages": messages, **kwargs}
    if tools:
        prepared["tools"] = tools_to_openai(tools)
        prepared["tool_choice"] = tool_choice
        prepared["parallel_tool_calls"] = allow_parallel_tool_calls
    return prepared


def first_call_only(response: ChatResponse) -> ChatResponse:
    """``response`` with only its first tool call (unchanged when it has at most one)."""
    calls = tool_selections(response.message)
    if len(calls) <= 1:
        return response
    first = calls[0]
    call = PartialToolCall(first.tool_id, first.tool_name, json.dumps(first.tool_kwargs))
    message = assistant_message(response.message.content or "", [call])
    return response.model_copy(update={"message": message})
