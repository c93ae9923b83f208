"""Responses API bodies to the client core's call options: the whole options of a request
are built here, in ``responses_options``, and nowhere else.

Function tools become chat tools and ``tool_choice`` the chat choice (a named function
enforced by grammar); ``text.format`` becomes the response format. ``reasoning.effort`` maps
onto the call's reasoning switch and budget (``reasoning_effort.reasoning_switch``): a reasoning
model thinks less for ``low`` than for ``medium``, not at all for ``none`` and ``minimal``, and
as long as it likes for ``high`` and above.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...client import CallOptions
from ..errors import invalid_request
from ..reasoning_effort import reasoning_switch
from .schemas import REFUSED_FIELDS, ResponsesBody

__all__ = ["chat_tool_choice", "chat_tools", "refuse_unsupported", "responses_options"]


def refuse_unsupported(body: ResponsesBody) -> None:
    """Refuse (400, naming the field) what this server cannot honour: stored state, logprobs,
    a verbosity other than the default.

    Raises:
        ApiError: the first such field.
    """
    for name, why in REFUSED_FIELDS.items():
        value = getattr(body, name)
        if value is not None and value is not False and value != []:
            raise invalid_request(f"{name} is not supported: {why}", name)
    if body.include and "message.output_text.logprobs" in body.include:
        raise invalid_request("log-probabilities are not supported on /v1/responses", "include")
    if body.text is not None and body.text.verbosity not in (None, "medium"):
        raise invalid_request(
            "text.verbosity other than 'medium' is not supported", "text.verbosity"
        )


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
        raise invalid_request(
            f"only function tools are supported; not {kinds}", f"tools[{refused[0][0]}].type"
        )
    out = []
    for i, tool in enumerate(tools):
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise invalid_request(f"tools[{i}] has no name", f"tools[{i}].name")
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
            raise invalid_request("tool_choice names no function", "tool_choice.name")
        return {"type": "function", "function": {"name": name}}
    raise invalid_request(
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
        raise invalid_request(
            "text.format of type json_schema needs a schema", "text.format.schema"
        )
    spec = {"name": form.name or "answer", "schema": form.json_schema, "strict": form.strict}
    return {"type": "json_schema", "json_schema": spec}


def responses_options(
    body: ResponsesBody,
    *,
    context: int,
    timeout: float | None,
    defaults: Mapping[str, Any] | None = None,
) -> CallOptions:
    """The call options of a Responses request; ``context`` is the model's context per
    sequence (the output limit when ``max_output_tokens`` is not given); what the body leaves
    out is taken from ``defaults`` (``ServerSettings.call_defaults``).

    Raises:
        ApiError: a field this server cannot honour.
    """
    refuse_unsupported(body)
    tools = chat_tools(body.tools)
    choice = chat_tool_choice(body.tool_choice)
    response_format = _response_format(body)
    if not tools and choice not in (None, "none", "auto"):
        raise invalid_request("tool_choice needs tools", "tool_choice")
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
        "lora": {c.id: c.scale for c in body.lora} if body.lora else None,
    }
    # A field left out is not passed, so the engine's default applies (None would mean "none").
    given = {name: value for name, value in kwargs.items() if value is not None}
    return CallOptions.merge(defaults or {}, given, owner="POST /v1/responses")
