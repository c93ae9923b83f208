"""Anthropic request bodies to the client core's call options.

The Messages endpoint builds its plan the way the framework adapters and the OpenAI endpoint
do (``client.CallOptions`` then ``client.chat_plan_factory``), so tools, every tool choice (a
named tool enforced by grammar), structured output and reasoning behave the same here:

* ``tools`` become OpenAI-style functions (``input_schema`` is their parameters); Anthropic's
  server tools (``web_search``, ``bash``...) are refused;
* ``tool_choice`` ``auto``/``any``/``tool``/``none`` become ``auto``/``required``/the named
  tool/``none``; ``disable_parallel_tool_use`` allows one call at most;
* ``thinking`` ``enabled`` turns a reasoning template's thinking on, its ``budget_tokens``
  becoming the engine's reasoning budget; ``disabled`` turns it off; ``adaptive`` (or no
  ``thinking``) leaves the template's default. A template without reasoning ignores it all;
* ``output_config.format`` (a JSON schema) becomes the response format;
* ``stop_sequences`` become stop strings (the engine tells which one ended the answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...client import CallOptions
from .errors import bad_request
from .schemas import REFUSED_FIELDS, CountTokensBody, MessagesBody

__all__ = ["count_options", "message_options"]

_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def _refused(body: CountTokensBody) -> None:
    for name, reason in REFUSED_FIELDS.items():
        if getattr(body, name):
            raise bad_request(f"not supported: {reason}", name)
    if body.output_config is not None and body.output_config.effort is not None:
        raise bad_request(
            "effort levels are not supported: use thinking (enabled with a budget_tokens, or "
            "disabled) to control a reasoning model",
            "output_config.effort",
        )


def _tools(body: CountTokensBody) -> dict[str, Any]:
    """The tool keywords: the tools as OpenAI functions, the choice, parallel calls."""
    choice = body.tool_choice
    if not body.tools:
        if choice is not None and choice.type in ("any", "tool"):
            raise bad_request(f"tool_choice {choice.type!r} needs tools", "tool_choice")
        return {}
    functions = []
    for i, tool in enumerate(body.tools):
        if tool.type not in (None, "custom"):
            raise bad_request(
                f"{tool.type!r} is one of Anthropic's server tools, which run on Anthropic's "
                "side: only client tools (name, description, input_schema) are supported",
                f"tools[{i}].type",
            )
        schema = tool.input_schema or {"type": "object", "properties": {}}
        function = {"name": tool.name, "description": tool.description or "", "parameters": schema}
        functions.append({"type": "function", "function": function})
    kwargs: dict[str, Any] = {"tools": functions}
    if choice is not None:
        if choice.type == "tool":
            if not choice.name:
                raise bad_request("a tool_choice of type 'tool' names its tool", "tool_choice.name")
            kwargs["tool_choice"] = {"name": choice.name}
        else:
            kwargs["tool_choice"] = _CHOICES[choice.type]
        if choice.disable_parallel_tool_use:
            kwargs["parallel_tool_calls"] = False
    return kwargs


def _prompt_keywords(body: CountTokensBody) -> dict[str, Any]:
    """The keywords that shape the prompt: tools, thinking and output format."""
    _refused(body)
    kwargs = _tools(body)
    thinking = body.thinking
    if thinking is not None and thinking.type != "adaptive":
        kwargs["reasoning"] = thinking.type == "enabled"
        if thinking.type == "enabled" and thinking.budget_tokens is not None:
            kwargs["reasoning_budget"] = thinking.budget_tokens
    output_format = body.output_config.format if body.output_config else None
    if output_format is not None:
        kwargs["response_format"] = _response_format(output_format)
    return kwargs


def _response_format(given: Mapping[str, Any]) -> dict[str, Any]:
    schema = given.get("schema")
    if given.get("type") != "json_schema" or not isinstance(schema, Mapping):
        raise bad_request(
            "the format must be {'type': 'json_schema', 'schema': {...}}", "output_config.format"
        )
    return {"type": "json_schema", "schema": dict(schema)}


def message_options(
    body: MessagesBody, *, timeout: float | None, defaults: Mapping[str, Any] | None = None
) -> CallOptions:
    """The call options of a Messages request (what it leaves out taken from ``defaults``,
    ``ServerSettings.call_defaults``).

    Raises:
        ApiError: a field this server refuses, or a tool or choice it cannot read.
    """
    kwargs = _prompt_keywords(body)
    kwargs["max_tokens"] = body.max_tokens
    sampling = {"temperature": body.temperature, "top_p": body.top_p, "top_k": body.top_k}
    kwargs |= {name: value for name, value in sampling.items() if value is not None}
    if timeout is not None:
        kwargs["timeout"] = timeout
    stops = [stop for stop in body.stop_sequences or () if stop]
    if stops:
        kwargs["stop"] = stops
    if body.lora:  # llama-server's per-request adapters, ids or names
        kwargs["lora"] = {choice.id: choice.scale for choice in body.lora}
    return CallOptions.merge(defaults or {}, kwargs, owner="POST /v1/messages")


def count_options(body: CountTokensBody) -> CallOptions:
    """The call options whose prompt ``count_tokens`` counts (tools and thinking included)."""
    return CallOptions.merge({}, _prompt_keywords(body), owner="POST /v1/messages/count_tokens")
