"""Messages, tools and variables adapted to what a chat template accepts.

``adapt_messages`` and ``adapt_tools`` change only what ``template_caps`` found the template
refuses, so the prompt of a template that needs nothing is exactly what it renders by itself:

- a system message refused: its text, a blank line, then the text of the user turn after it
  (the way ``transformers`` and llama.cpp's minja fold it);
- tool-call arguments wanted as a JSON string: the object is written as one;
- tool results not rendered: each becomes a user turn holding ``<tool_response>`` markup;
- tool results and a following user turn refused side by side: the assistant turn the probe
  found acceptable (an empty one where allowed) is put between them;
- two turns of one role in a row refused: they are merged, texts a blank line apart;
- string content refused: it is given as one text part;
- undescribed tool parameters refused: they get an empty description.

``template_variables`` supplies the variables some templates read without defining them, for
the few whose meaning is clear: today's date (``date_string``, as Llama 3.1's templates expect
it, and ``current_date``), and firefunction's ``functions`` (the tools as JSON text) and
``datetime``. Only the variables a template reads are set, and a caller's own values win.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from .template_caps import TemplateCaps

__all__ = ["Message", "adapt_messages", "adapt_tools", "template_variables"]

Message = Mapping[str, Any]
"""A chat message as templates read it (role, content, tool calls...)."""

_MERGED_ROLES = ("user", "assistant")


def adapt_messages(caps: TemplateCaps, messages: Sequence[Message]) -> list[Message]:
    """``messages`` in the shapes ``caps`` says the template accepts (new dicts where changed;
    the given ones are never modified)."""
    out: list[Message] = list(messages)
    if caps.string_arguments:
        out = [_with_string_arguments(m) for m in out]
    if not caps.tool_role:
        names = _call_names(out)
        out = [_result_as_user(m, names) if m.get("role") == "tool" else m for m in out]
    elif caps.tool_answer_bridge is not None:
        out = _bridged(out, caps.tool_answer_bridge)
    if not caps.system_role:
        out = _systems_folded(out)
    if caps.strict_alternation:
        out = _same_roles_merged(out)
    if caps.typed_content:
        out = [_typed(m) for m in out]
    return out


def adapt_tools(
    caps: TemplateCaps, tools: Sequence[Mapping[str, Any]] | None
) -> list[Mapping[str, Any]] | None:
    """``tools`` as the template accepts them (``None`` stays ``None``)."""
    if tools is None:
        return None
    if not caps.described_parameters:
        return list(tools)
    return [_described(tool) for tool in tools]


def template_variables(
    reads: Iterable[str], tools: Sequence[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """Values for the variables among ``reads`` (the names a template reads without setting
    them) whose meaning is known."""
    names = set(reads)
    now = datetime.now()
    variables: dict[str, Any] = {}
    if "date_string" in names:  # Llama 3.1-3.3: "Today Date: 26 Jul 2024" when unset
        variables["date_string"] = now.strftime("%d %b %Y")
    if "current_date" in names:  # beside an ISO knowledge cutoff (muse-glimmer)
        variables["current_date"] = now.strftime("%Y-%m-%d")
    if "datetime" in names:
        # firefunction v2 says "Today is {datetime}." llama.cpp passes the time of day too;
        # the date alone keeps the system prompt (and the prompt cache) the same all day.
        variables["datetime"] = datetime.now(UTC).strftime("%b %d %Y")
    if "functions" in names:  # firefunction v2: the tools as JSON text, empty without tools
        variables["functions"] = json.dumps(_plain(tools), indent=2) if tools else ""
    return variables


# -- the message polyfills ----------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(
        str(part.get("text", ""))
        for part in content
        if isinstance(part, Mapping) and part.get("type") == "text"
    )


def _joined(first: Any, second: Any) -> Any:
    """Two contents as one, a blank line apart (lists of parts stay lists)."""
    if isinstance(first, str | None) and isinstance(second, str | None):
        return "\n\n".join(text for text in (first, second) if text)
    parts: list[Any] = []
    for content in (first, second):
        if isinstance(content, str):
            parts.append({"type": "text", "text": content})
        elif content:
            parts.extend(content)
    return parts


def _with_string_arguments(message: Message) -> Message:
    calls = message.get("tool_calls")
    if not calls:
        return message
    return {**message, "tool_calls": [_string_call(call) for call in calls]}


def _string_call(call: Any) -> Any:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or isinstance(function.get("arguments"), str):
        return call
    arguments = json.dumps(_plain(function.get("arguments") or {}), ensure_ascii=False)
    return {**call, "function": {**function, "arguments": arguments}}


def _call_names(messages: list[Message]) -> dict[Any, Any]:
    """The tool each call id of the assistant turns names."""
    names: dict[Any, Any] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping) and isinstance(call.get("id"), str):
                names[call["id"]] = function.get("name")
    return names


def _result_as_user(message: Message, names: Mapping[Any, Any]) -> Message:
    name = message.get("name") or names.get(message.get("tool_call_id")) or "tool"
    result = {"name": name, "content": _text_of(message.get("content"))}
    text = f"<tool_response>\n{json.dumps(result, ensure_ascii=False)}\n</tool_response>"
    return {"role": "user", "content": text}


def _bridged(messages: list[Message], bridge: str) -> list[Message]:
    out: list[Message] = []
    for message in messages:
        if message.get("role") == "user" and out and out[-1].get("role") == "tool":
            out.append({"role": "assistant", "content": bridge})
        out.append(message)
    return out


def _systems_folded(messages: list[Message]) -> list[Message]:
    """Each system message's text put before the user turn that follows it (a user turn of
    its own when none follows)."""
    out: list[Message] = []
    pending: Any = None
    for message in messages:
        role = message.get("role")
        if role == "system":
            pending = _joined(pending, message.get("content"))
        elif role == "user" and pending is not None:
            out.append({**message, "content": _joined(pending, message.get("content"))})
            pending = None
        else:
            out.append(message)
    if pending is not None:
        out.append({"role": "user", "content": pending})
    return out


def _same_roles_merged(messages: list[Message]) -> list[Message]:
    out: list[Message] = []
    for message in messages:
        previous = out[-1] if out else None
        if (
            previous is not None
            and message.get("role") in _MERGED_ROLES
            and previous.get("role") == message.get("role")
            and not previous.get("tool_calls")
            and not message.get("tool_calls")
        ):
            out[-1] = {
                **previous,
                "content": _joined(previous.get("content"), message.get("content")),
            }
        else:
            out.append(message)
    return out


def _typed(message: Message) -> Message:
    content = message.get("content")
    if not isinstance(content, str):
        return message
    return {**message, "content": [{"type": "text", "text": content}]}


# -- tools ----------------------------------------------------------------------------------------


def _described(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    function = tool.get("function")
    spec = function if isinstance(function, Mapping) else tool
    parameters = spec.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(parameters, Mapping) or not isinstance(properties, Mapping):
        return tool
    described = {
        name: {"description": "", **field} if isinstance(field, Mapping) else field
        for name, field in properties.items()
    }
    spec = {**spec, "parameters": {**parameters, "properties": described}}
    return {**tool, "function": spec} if isinstance(function, Mapping) else spec


def _plain(value: Any) -> Any:
    """``value`` with read-only mappings and sequences as dicts and lists, for ``json``."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(item) for item in value]
    return value
