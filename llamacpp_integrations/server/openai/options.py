"""OpenAI request bodies to the client core's call options: each body's whole options are
built here, in one function per body (reasoning included), and nowhere else.

The chat endpoint builds its plan the way the framework adapters do (``client.CallOptions``
then ``client.chat_plan_factory``), so tools, every ``tool_choice`` (a named function enforced
by grammar), ``response_format`` and reasoning behave exactly as they do in LangChain and
LlamaIndex. Its messages are read by ``chat_messages``; its reasoning asks by ``reasoning``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from ...client import CallOptions
from ...engine import CompletionRequest, SamplingParams
from ..errors import invalid_request
from .field_policy import CHAT_REFUSED, COMPLETION_REFUSED, refuse_unhonoured
from .reasoning import reasoning_ask
from .schemas import ChatCompletionBody, CompletionBody, SamplingFields

__all__ = ["chat_options", "completion_options", "completion_request"]

_SAMPLING = tuple(f.name for f in fields(SamplingParams))


def _given(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords a body gave: a field left out of the body is ``None`` here, and a call
    reads ``None`` as "none" (``max_tokens=None``: no limit), so it is not passed at all and
    the default applies."""
    return {name: value for name, value in kwargs.items() if value is not None}


def _common(body: SamplingFields, timeout: float | None) -> dict[str, Any]:
    """The call keywords both generation endpoints share (``n`` is not one: each of ``n``
    answers is a call of its own, see ``choices``)."""
    bias: dict[int, float] | None = None
    if body.logit_bias:
        try:
            bias = {int(token): value for token, value in body.logit_bias.items()}
        except ValueError:
            raise invalid_request("logit_bias keys must be token ids", "logit_bias") from None
    kwargs: dict[str, Any] = {name: getattr(body, name, None) for name in _SAMPLING}
    kwargs |= {"logit_bias": bias, "stop": body.stop, "timeout": timeout, "grammar": body.grammar}
    if body.lora:  # llama-server's shape (an empty list asks for nothing); ids or names
        kwargs["lora"] = {choice.id: choice.scale for choice in body.lora}
    return kwargs


def chat_options(
    body: ChatCompletionBody,
    *,
    timeout: float | None,
    context: int | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> CallOptions:
    """The call options of a chat completion request, its reasoning asks resolved
    (``reasoning.reasoning_ask``).

    Args:
        body: The request's body.
        timeout: Seconds the generation may take (``None``: no limit).
        context: The tokens one request of the model may take: the output limit an effort's
            budget is a share of when the body sets no ``max_tokens`` (``None``: then an effort
            sets no budget).
        defaults: What the body leaves out takes from here (``ServerSettings.call_defaults``).

    Raises:
        ApiError: a field this server cannot honour, or reasoning asks that disagree.
        InvalidRequestError: options that contradict each other (tools with a response format).
    """
    refuse_unhonoured(body.model_extra, CHAT_REFUSED)
    kwargs = _common(body, timeout)
    kwargs["max_tokens"] = body.max_completion_tokens or body.max_tokens
    ask = reasoning_ask(body, kwargs["max_tokens"] or context)
    kwargs |= {
        "logprobs": body.logprobs,
        "top_logprobs": body.top_logprobs,
        "reasoning": ask.reasoning,
        "reasoning_budget": ask.budget,
        "template_kwargs": ask.template_kwargs or None,
    }
    if body.response_format is not None and body.response_format.get("type") != "text":
        kwargs["response_format"] = body.response_format
    if body.tools:
        kwargs["tools"] = body.tools
        kwargs["tool_choice"] = body.tool_choice
        if body.parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = body.parallel_tool_calls
    elif body.tool_choice not in (None, "none", "auto"):
        raise invalid_request("tool_choice needs tools", "tool_choice")
    return CallOptions.merge(defaults or {}, _given(kwargs), owner="POST /v1/chat/completions")


def completion_options(
    body: CompletionBody, *, timeout: float | None, defaults: Mapping[str, Any] | None = None
) -> CallOptions:
    """The call options of a legacy completion request (``defaults``: as ``chat_options``)."""
    refuse_unhonoured(body.model_extra, COMPLETION_REFUSED)
    if body.echo:
        raise invalid_request("echo is not supported", "echo")
    if body.suffix:
        raise invalid_request("suffix is not supported", "suffix")
    kwargs = _common(body, timeout)
    kwargs |= {"max_tokens": body.max_tokens}
    if body.logprobs is not None:
        kwargs |= {"logprobs": True, "top_logprobs": body.logprobs}
    return CallOptions.merge(
        defaults or {}, _given(kwargs), owner="POST /v1/completions", chat=False
    )


def completion_request(body: CompletionBody, options: CallOptions) -> CompletionRequest:
    """The engine request of a legacy completion: one prompt, text or token ids."""
    prompt: str | list[int]
    if isinstance(body.prompt, str):
        prompt = body.prompt
    elif body.prompt and all(isinstance(p, int) for p in body.prompt):
        prompt = [int(p) for p in body.prompt]
    elif len(body.prompt) == 1 and isinstance(body.prompt[0], str):
        prompt = body.prompt[0]
    else:
        raise invalid_request("prompt must be one string (or one list of token ids)", "prompt")
    return CompletionRequest(
        prompt=prompt,
        sampling=options.sampling,
        max_tokens=options.max_tokens,
        stop=options.stop,
        timeout=options.timeout,
        logprobs=options.logprobs,
        grammar=options.grammar,
        lora=options.lora,
    )
