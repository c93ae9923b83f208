"""Putting tools and tool history into the prompt, by the model's template or by ours.

A chat template "knows tools" when rendering shows the tools it is given, earlier calls and
their results; that is found out by rendering probe conversations, never by template names. A
template that knows tools gets them and the history as it expects them. Any other template
(SmolLM2's plain ChatML, Gemma's) gets the tools described in the system prompt, earlier
calls written in the ``<tool_call>[...]</tool_call>`` list markup the answer will use, and tool
results as user turns, so that even a template that only knows user and assistant renders
readable turns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..engine import ChatRequest, InferenceEngine
from ..errors import ChatTemplateError, InvalidRequestError
from .call_syntax import HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS, CallSyntax
from .given_calls import read_tool_calls
from .tool_spec import ToolChoice, ToolSpec

__all__ = [
    "TemplateToolSupport",
    "calls_of",
    "detect_tool_support",
    "fallback_history",
    "native_history",
    "with_tool_instructions",
]

_PROBE_NAME = "probe_tool_q7x"
_PROBE_ARGUMENT = "probe_value_k3"
_PROBE_RESULT = "probe_result_z9"
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": _PROBE_NAME,
        "description": "Probe tool.",
        "parameters": {
            "type": "object",
            "properties": {"probe_arg": {"type": "string"}},
            "required": ["probe_arg"],
        },
    },
}
_PROBE_ID = "pr0beCa11"  # nine alphanumerics: Mistral templates refuse other ids
_PROBE_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Probe question."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": _PROBE_ID,
                "type": "function",
                "function": {"name": _PROBE_NAME, "arguments": {"probe_arg": _PROBE_ARGUMENT}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": _PROBE_ID, "name": _PROBE_NAME, "content": _PROBE_RESULT},
]


@dataclass(frozen=True)
class TemplateToolSupport:
    """What rendering probes showed about a chat template; ``syntax`` set means native."""

    renders_tools: bool
    renders_tool_calls: bool
    renders_tool_results: bool
    syntax: CallSyntax | None

    @property
    def native(self) -> bool:
        return self.syntax is not None


def _render(engine: InferenceEngine, messages: list[dict[str, Any]], template: str | None) -> str:
    try:
        return engine.render_chat(
            ChatRequest(messages=messages, tools=[_PROBE_TOOL], chat_template=template)
        )
    except (ChatTemplateError, InvalidRequestError):
        return ""


def detect_tool_support(
    engine: InferenceEngine, chat_template: str | None = None
) -> TemplateToolSupport:
    """Probe the template in effect (``chat_template`` or the model's) for tool support.

    Raises:
        ChatTemplateError: there is no template at all.
    """
    engine.render_chat(  # a template that cannot render a plain turn is the caller's problem
        ChatRequest(messages=[{"role": "user", "content": "x"}], chat_template=chat_template)
    )
    with_tools = _render(engine, _PROBE_HISTORY[:1], chat_template)
    history = _render(engine, _PROBE_HISTORY, chat_template)
    renders_tools = _PROBE_NAME in with_tools
    renders_calls = _PROBE_ARGUMENT in history
    renders_results = _PROBE_RESULT in history
    syntax = None
    if renders_tools and renders_calls and renders_results:
        syntax = _syntax_of(history)
    return TemplateToolSupport(renders_tools, renders_calls, renders_results, syntax)


def _syntax_of(rendered_history: str) -> CallSyntax | None:
    if "<tool_call>" in rendered_history:
        return HERMES
    if "[TOOL_CALLS]" in rendered_history:
        return MISTRAL_ARGS if "[ARGS]" in rendered_history else MISTRAL
    # The call itself, not just "parameters": tool listings hold that key too (firefunction's
    # Llama 3 template lists tools so, yet writes calls as functools[...]).
    llama3_call = f'{{"name": "{_PROBE_NAME}", "parameters"'
    if llama3_call in rendered_history and "<|start_header_id|>" in rendered_history:
        return LLAMA3
    return None  # a tool format this package cannot parse: use the fallback prompt


# -- history -------------------------------------------------------------------------------------


def calls_of(message: Mapping[str, Any]) -> list[tuple[str | None, str, Any]]:
    """(id, name, arguments) of an assistant message's calls, read by ``read_tool_calls`` (in
    any of its shapes, malformed calls refused with ``InvalidRequestError``)."""
    given = read_tool_calls(message.get("tool_calls") or (), where="tool_calls")
    return [(call.id, call.name, call.arguments) for call in given]


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return json.dumps(content, default=str)


def _images_of(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str) or not isinstance(content, Sequence):
        return []
    return [part for part in content if isinstance(part, Mapping) and part.get("type") == "image"]


def _calls_by_id(messages: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, Any]]:
    """The name and arguments of every assistant call, by its id."""
    return {
        call_id: (name, arguments)
        for message in messages
        if message.get("role") == "assistant"
        for call_id, name, arguments in calls_of(message)
        if call_id is not None
    }


def native_history(
    messages: Sequence[Mapping[str, Any]], syntax: CallSyntax
) -> list[dict[str, Any]]:
    """Messages in the shape tool-aware templates index into (OpenAI style, arguments as
    objects, tool results named); Mistral templates also get their nine-character ids."""
    remap = _mistral_id if syntax in (MISTRAL, MISTRAL_ARGS) else (lambda call_id: call_id)
    calls = _calls_by_id(messages)
    out: list[dict[str, Any]] = []
    for message in messages:
        item = dict(message)
        if message.get("tool_calls"):
            item["content"] = message.get("content") or ""
            item["tool_calls"] = [
                {
                    "id": remap(call_id or f"call{i}"),
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for i, (call_id, name, arguments) in enumerate(calls_of(message))
            ]
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            call = calls.get(call_id or "")
            item.setdefault("name", call[0] if call else "")
            if call_id is not None:
                item["tool_call_id"] = remap(call_id)
        out.append(item)
    return out


def _mistral_id(call_id: str) -> str:
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


NEXT_STEP = "Answer the user's question with these results."
"""Said after the tool results that end a conversation, where the model speaks next: small
models otherwise read a result as a cue to call the same tool again. Measured on the agent
suite, a longer line that also offered another call made the tiny model talk about the
results (or the tools) instead of answering, and finished fewer tasks."""


def fallback_history(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a template that knows no tools: calls become the answer's list markup in
    the assistant's text, results become user turns (merged with the user turns around them),
    each naming the call it answers; results that end the conversation are followed by
    ``NEXT_STEP``."""
    answered = _calls_by_id(messages)
    out: list[dict[str, Any]] = []
    merge_next = False
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            calls = [
                {"name": name, "arguments": arguments} for _, name, arguments in calls_of(message)
            ]
            block = f"<tool_call>{json.dumps(calls, ensure_ascii=False)}</tool_call>"
            text = _text_of(message.get("content"))
            out.append({"role": "assistant", "content": f"{block}\n{text}" if text else block})
            merge_next = False
        elif role == "tool":
            call_id = message.get("tool_call_id") or ""
            call = answered.get(call_id)
            content = message.get("content")
            name = message.get("name") or (call[0] if call else "tool")
            result: dict[str, Any] = {"name": name}
            if call is not None:
                result["arguments"] = call[1]
            result["content"] = _text_of(content)
            text = f"<tool_response>\n{json.dumps(result, ensure_ascii=False)}\n</tool_response>"
            merge = bool(out) and out[-1]["role"] == "user"
            _append_user(out, text, merge=merge, images=_images_of(content))
            merge_next = True
        elif role == "user" and merge_next:
            content = message.get("content")
            _append_user(out, _text_of(content), merge=True, images=_images_of(content))
        else:
            out.append(dict(message))
            merge_next = False
    if messages and messages[-1].get("role") == "tool":
        _append_user(out, NEXT_STEP, merge=True)
    return out


def _append_user(
    out: list[dict[str, Any]],
    text: str,
    *,
    merge: bool,
    images: Sequence[Mapping[str, Any]] = (),
) -> None:
    # Images (a tool's screenshot, a user's photo) stay parts of the turn, after its text.
    if merge and out and out[-1]["role"] == "user":
        previous = out[-1]["content"]
        text = _text_of(previous) + "\n" + text
        images = [*_images_of(previous), *images]
        out.pop()
    content: Any = [{"type": "text", "text": text}, *images] if images else text
    out.append({"role": "user", "content": content})


# -- the fallback instructions -------------------------------------------------------------------


def _instructions(tools: Sequence[ToolSpec], choice: ToolChoice, parallel: bool) -> str:
    # Written for the answer grammar of TOOL_CALL_LIST: every answer opens with the list of
    # calls, empty when the reply is text (see tool_grammar.tool_calls_gbnf).
    described = json.dumps(
        [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools],
        ensure_ascii=False,
        default=dict,
    )
    if choice.name is not None:
        when = f'Call the tool "{choice.name}".'
    elif choice.mode == "required":
        when = "Call at least one tool."
    else:
        when = (
            "When no tool fits, the list is empty (<tool_call>[]</tool_call>) and your reply "
            "to the user follows it."
        )
    how_many = "" if parallel else " Put a single call in the list."
    return (
        "You have these tools (name, description and the JSON schema of the arguments):\n"
        f"<tools>{described}</tools>\n"
        "Start every answer with the list of tool calls to make, as JSON inside "
        "<tool_call></tool_call>, for example:\n"
        '<tool_call>[{"name": "tool_name", "arguments": {"arg": "value"}}]</tool_call>\n'
        f"{when}{how_many} Tool results come back inside <tool_response></tool_response>."
    )


def with_tool_instructions(
    messages: list[dict[str, Any]],
    tools: Sequence[ToolSpec],
    choice: ToolChoice,
    parallel: bool,
) -> list[dict[str, Any]]:
    """``messages`` with the tool instructions added to (or as) the system message."""
    instructions = _instructions(tools, choice, parallel)
    if messages and messages[0].get("role") == "system":
        system = _text_of(messages[0].get("content"))
        merged = f"{system}\n\n{instructions}" if system else instructions
        return [{**messages[0], "content": merged}, *messages[1:]]
    return [{"role": "system", "content": instructions}, *messages]
