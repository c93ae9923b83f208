"""Responses API bodies to the client core's calls: options, and ``input`` as chat messages.

``input`` is turned into the chat-completions messages the chat endpoint reads
(``requests.messages_reader``), so images, earlier calls and reasoning reach the template
exactly as they do from ``/v1/chat/completions``; what the Responses API spreads over several
items of one answer (its reasoning, its message, its function calls) becomes one assistant
message. Every item is checked here first, so a mistake is answered naming the item
(``input[3].arguments``), not the chat message it would have become.

``reasoning.effort`` maps onto the call's reasoning switch and budget
(``reasoning_effort.reasoning_switch``): a reasoning model thinks less for ``low`` than for
``medium``, not at all for ``none`` and ``minimal``, and as long as it likes for ``high`` and
above.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...client import CallOptions
from ...tools import parse_partial_json
from ..errors import ApiError
from ..reasoning_effort import reasoning_switch
from ..openai.options import ImageReader, messages_reader
from .schemas import REFUSED_FIELDS, ResponsesBody

__all__ = [
    "chat_messages",
    "chat_tool_choice",
    "chat_tools",
    "refuse_unsupported",
    "responses_messages_reader",
    "responses_options",
]

_INPUT_ROLES = frozenset({"user", "system", "developer"})


def _bad(message: str, param: str | None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", "invalid_request", param)


def refuse_unsupported(body: ResponsesBody) -> None:
    """Refuse (400, naming the field) what this server cannot honour: stored state, logprobs,
    a verbosity other than the default.

    Raises:
        ApiError: the first such field.
    """
    for name, why in REFUSED_FIELDS.items():
        value = getattr(body, name)
        if value is not None and value is not False and value != []:
            raise _bad(f"{name} is not supported: {why}", name)
    if body.include and "message.output_text.logprobs" in body.include:
        raise _bad("log-probabilities are not supported on /v1/responses", "include")
    if body.text is not None and body.text.verbosity not in (None, "medium"):
        raise _bad("text.verbosity other than 'medium' is not supported", "text.verbosity")


def chat_tools(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    """Function tools in the chat shape (``{"type": "function", "function": {...}}``).

    Raises:
        ApiError: a tool that is not a function (``web_search``, ``file_search``...): only
            function tools are served here, the others need OpenAI's own services.
    """
    if not tools:
        return None
    refused = [
        (i, tool.get("type") if isinstance(tool, Mapping) else None)
        for i, tool in enumerate(tools)
        if not isinstance(tool, Mapping) or tool.get("type") != "function"
    ]
    if refused:
        kinds = ", ".join(f"tools[{i}] ({kind!r})" for i, kind in refused)
        raise _bad(
            f"only function tools are supported; not {kinds}", f"tools[{refused[0][0]}].type"
        )
    out = []
    for i, tool in enumerate(tools):
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise _bad(f"tools[{i}] has no name", f"tools[{i}].name")
        function = {"name": name, "description": tool.get("description") or ""}
        if tool.get("parameters") is not None:
            function["parameters"] = tool["parameters"]
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: object) -> str | dict[str, Any] | None:
    """``tool_choice`` in the chat shape: ``"none"``, ``"auto"``, ``"required"``, or a named
    function (``{"type": "function", "name": ...}``), which is enforced by grammar.

    Raises:
        ApiError: any other choice (allowed tools, hosted tools, custom tools).
    """
    if choice is None or choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise _bad("tool_choice names no function", "tool_choice.name")
        return {"type": "function", "function": {"name": name}}
    raise _bad(
        "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'name': ...}",
        "tool_choice",
    )


def _response_format(body: ResponsesBody) -> dict[str, Any] | None:
    form = body.text.format if body.text is not None else None
    if form is None or form.type == "text":
        return None
    if form.type == "json_object":
        return {"type": "json_object"}
    if form.json_schema is None:
        raise _bad("text.format of type json_schema needs a schema", "text.format.schema")
    spec = {"name": form.name or "answer", "schema": form.json_schema, "strict": form.strict}
    return {"type": "json_schema", "json_schema": spec}


def responses_options(body: ResponsesBody, *, context: int, timeout: float | None) -> CallOptions:
    """The call options of a Responses request; ``context`` is the model's context per
    sequence (the output limit when ``max_output_tokens`` is not given).

    Raises:
        ApiError: a field this server cannot honour.
    """
    refuse_unsupported(body)
    tools = chat_tools(body.tools)
    choice = chat_tool_choice(body.tool_choice)
    response_format = _response_format(body)
    if not tools and choice not in (None, "none", "auto"):
        raise _bad("tool_choice needs tools", "tool_choice")
    effort = body.reasoning.effort if body.reasoning is not None else None
    reasoning, budget = reasoning_switch(effort, body.max_output_tokens or context)
    kwargs: dict[str, Any] = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "top_k": body.top_k,
        "min_p": body.min_p,
        "repeat_penalty": body.repeat_penalty,
        "seed": body.seed,
        "max_tokens": body.max_output_tokens,
        "timeout": timeout,
        "reasoning": reasoning,
        "reasoning_budget": budget,
        "response_format": response_format,
        "tools": tools,
        "tool_choice": choice if tools else None,
        "parallel_tool_calls": body.parallel_tool_calls if tools else None,
    }
    # A field left out is not passed, so the engine's default applies (None would mean "none").
    given = {name: value for name, value in kwargs.items() if value is not None}
    return CallOptions.merge({}, given, owner="POST /v1/responses")


# ---- input ----------------------------------------------------------------------------------


def _text(value: object, param: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{param} must be a string", param)
    return value


def _input_content(content: object, role: str, param: str) -> str | list[dict[str, Any]]:
    """A user, system or developer message's content as chat parts (text, images)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{param} must be a string or a list of parts", param)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "input_text":
            parts.append({"type": "text", "text": _text(part.get("text"), f"{where}.text")})
        elif kind == "input_image" and role == "user":
            url = part.get("image_url")
            if part.get("file_id") is not None and url is None:
                raise _bad(
                    "file_id needs OpenAI's Files API: send the image as image_url (a data: URI)",
                    f"{where}.file_id",
                )
            if not isinstance(url, str) or not url:
                raise _bad(f"{where} names no image_url", f"{where}.image_url")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            allowed = "input_text and input_image" if role == "user" else "input_text"
            raise _bad(f"{where}: parts of type {kind!r} are not supported ({allowed} are)", where)
    return parts


def _output_text(content: object, param: str) -> str:
    """An assistant message's text: a string, or its ``output_text`` parts (refusals are
    left out, as the chat endpoint leaves them out)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{param} must be a string or a list of parts", param)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("output_text", "input_text"):
            texts.append(_text(part.get("text"), f"{param}[{j}].text"))
        elif kind != "refusal":
            raise _bad(f"{param}[{j}]: parts of type {kind!r} are not supported", f"{param}[{j}]")
    return "".join(texts)


def _reasoning_text(item: Mapping[str, Any], param: str) -> str:
    """An earlier answer's reasoning: its text, else its summary (what OpenAI gives back)."""
    for key in ("content", "summary"):
        parts = item.get(key)
        if isinstance(parts, list) and parts:
            return "".join(
                _text(p.get("text") if isinstance(p, Mapping) else None, f"{param}.{key}[{j}].text")
                for j, p in enumerate(parts)
            )
    return ""


def _call(item: Mapping[str, Any], param: str) -> dict[str, Any]:
    """An earlier ``function_call`` item as a chat tool call (arguments read leniently, as a
    call cut by ``max_output_tokens`` may come back)."""
    call_id = _text(item.get("call_id"), f"{param}.call_id")
    name = _text(item.get("name"), f"{param}.name")
    if not name:
        raise _bad(f"{param}.name is empty", f"{param}.name")
    arguments = _text(item.get("arguments", ""), f"{param}.arguments")
    try:
        value = parse_partial_json(arguments) if arguments.strip() else {}
    except ValueError:
        raise _bad(f"{param}.arguments is not JSON", f"{param}.arguments") from None
    if not isinstance(value, Mapping):
        raise _bad(f"{param}.arguments must be a JSON object", f"{param}.arguments")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": value}}


def _call_output(item: Mapping[str, Any], param: str) -> str:
    output = item.get("output")
    if isinstance(output, list):
        texts = []
        for j, part in enumerate(output):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind != "input_text":
                raise _bad(
                    f"{param}.output[{j}]: only input_text parts are supported in a call's output",
                    f"{param}.output[{j}]",
                )
            texts.append(_text(part.get("text"), f"{param}.output[{j}].text"))
        return "".join(texts)
    return _text(output, f"{param}.output")


class _Conversation:
    """Chat messages built from input items; consecutive items of one answer (reasoning,
    message, function calls) make one assistant message."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._turn: dict[str, Any] | None = None
        self._names: dict[str, str] = {}  # call id -> function name, for the results

    def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self._turn = None

    def turn(self, *, fresh: bool = False) -> dict[str, Any]:
        """The assistant message being built (a new one after other messages, or if
        ``fresh``)."""
        if self._turn is None or fresh:
            self._turn = {"role": "assistant", "content": ""}
            self.messages.append(self._turn)
        return self._turn

    def reasoning(self, text: str) -> None:
        # Reasoning opens an answer: after its text or calls it belongs to the next one.
        turn = self._turn
        fresh = turn is not None and bool(turn["content"] or turn.get("tool_calls"))
        turn = self.turn(fresh=fresh)
        turn["reasoning_content"] = turn.get("reasoning_content", "") + text

    def call(self, call: dict[str, Any]) -> None:
        self.turn().setdefault("tool_calls", []).append(call)
        self._names[call["id"]] = call["function"]["name"]

    def result(self, call_id: str, output: str) -> None:
        message = {"role": "tool", "tool_call_id": call_id, "content": output}
        if call_id in self._names:  # some templates print the function's name with its result
            message["name"] = self._names[call_id]
        self.add(message)


def _item(conversation: _Conversation, item: object, param: str) -> None:
    if not isinstance(item, Mapping):
        raise _bad(f"{param} must be an object", param)
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        role = item.get("role")
        content = item.get("content")
        if role == "assistant":
            turn = conversation.turn()
            turn["content"] += _output_text(content, f"{param}.content")
        elif role in _INPUT_ROLES:
            message = {"role": role, "content": _input_content(content, role, f"{param}.content")}
            conversation.add(message)
        else:
            raise _bad(f"{param}.role {role!r} is not a message role", f"{param}.role")
    elif kind == "function_call":
        conversation.call(_call(item, param))
    elif kind == "function_call_output":
        call_id = _text(item.get("call_id"), f"{param}.call_id")
        conversation.result(call_id, _call_output(item, param))
    elif kind == "reasoning":
        conversation.reasoning(_reasoning_text(item, param))
    elif kind == "item_reference":
        raise _bad("item_reference needs stored responses: this server keeps none", param)
    else:
        raise _bad(
            f"{param}: items of type {kind!r} are not supported (message, function_call, "
            "function_call_output and reasoning are)",
            f"{param}.type",
        )


def chat_messages(instructions: str | None, given: object) -> list[dict[str, Any]]:
    """``instructions`` and ``input`` as chat-completions messages.

    Raises:
        ApiError: an item or part that is malformed or not supported, named by its path.
    """
    conversation = _Conversation()
    if instructions:
        conversation.add({"role": "system", "content": instructions})
    if isinstance(given, str):
        conversation.add({"role": "user", "content": given})
    elif isinstance(given, list) and given:
        for i, item in enumerate(given):
            _item(conversation, item, f"input[{i}]")
    else:
        raise _bad("input must be a string or a non-empty list of items", "input")
    return conversation.messages


def responses_messages_reader(
    body: ResponsesBody,
) -> Callable[[ImageReader | None], list[dict[str, Any]]]:
    """What gives the engine the request's messages, reading images with the reader the
    client core gives (``requests.messages_reader``, after ``chat_messages``).

    Raises:
        ApiError: a malformed or unsupported item (checked now, before any work).
    """
    return messages_reader(chat_messages(body.instructions, body.input))
