"""A chat completion body's reasoning asks, resolved together (``options.chat_options`` puts
them in the call's options).

A reasoning model's thinking can be asked for in three ways, and a request may use any of
them: ``reasoning`` (this server's extension), ``chat_template_kwargs.enable_thinking``
(llama-server's and vLLM's way) and OpenAI's ``reasoning_effort``. They all set the client
core's reasoning switch (``CallOptions.reasoning``), which sets whatever switch the model's
template has (Qwen3's ``enable_thinking``, DeepSeek-V3.1's ``thinking``) and reads the output
accordingly; asks that disagree are refused with a 400 naming the field.

``reasoning_effort`` maps as the Responses API's ``reasoning.effort`` does
(``reasoning_effort.reasoning_switch``): ``none`` and ``minimal`` turn thinking off;
``low`` and ``medium`` turn it on with a budget of a quarter and a half of the answer's token
limit (``max_completion_tokens``/``max_tokens``, else the context); ``high`` and above turn it on
with no budget of its own. A ``reasoning_budget`` given with it wins. ``low``, ``medium`` and
``high`` also reach the template as ``reasoning_effort``, as llama-server passes them (gpt-oss
templates read it), unless ``chat_template_kwargs`` sets it.

Every other ``chat_template_kwargs`` entry is passed to the template as a variable
(``CallOptions.template_kwargs``); ``enable_thinking`` is passed too, for a template that reads
it without being detected as a reasoning template.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import invalid_request
from ..reasoning_effort import reasoning_switch
from .schemas import ChatCompletionBody

__all__ = ["TEMPLATE_EFFORTS", "ReasoningAsk", "reasoning_ask"]

TEMPLATE_EFFORTS = ("low", "medium", "high")
"""The efforts passed to the template as ``reasoning_effort`` (the values gpt-oss reads)."""


@dataclass(frozen=True)
class ReasoningAsk:
    """What a chat request asks of a reasoning model: the switch (``None``: the template's
    default), the thinking budget, and the template's variables."""

    reasoning: bool | None
    budget: int | None
    template_kwargs: dict[str, Any]


def reasoning_ask(body: ChatCompletionBody, limit: int | None) -> ReasoningAsk:
    """The reasoning asks of ``body`` resolved (``limit``: the most tokens its answer may
    take, which an effort's budget is a share of; ``None``: no limit, so no share).

    Raises:
        ApiError: ``enable_thinking`` that is not a boolean, or asks that disagree.
    """
    kwargs = dict(body.chat_template_kwargs or {})
    asks: list[tuple[str, bool]] = []
    if body.reasoning is not None:
        asks.append(("reasoning", body.reasoning))
    if "enable_thinking" in kwargs:
        thinking = kwargs["enable_thinking"]
        if not isinstance(thinking, bool):
            param = "chat_template_kwargs.enable_thinking"
            raise invalid_request(f"{param} must be true or false", param)
        asks.append(("chat_template_kwargs.enable_thinking", thinking))
    switch, budget = reasoning_switch(body.reasoning_effort, limit)
    if switch is not None:
        asks.append(("reasoning_effort", switch))
    if body.reasoning_effort in TEMPLATE_EFFORTS:
        kwargs.setdefault("reasoning_effort", body.reasoning_effort)
    for param, value in asks[1:]:
        first, asked = asks[0]
        if value != asked:
            on = "on" if asked else "off"
            raise invalid_request(
                f"{param} disagrees with {first}, which turns reasoning {on}", param
            )
    if body.reasoning_budget is not None:
        budget = body.reasoning_budget
    return ReasoningAsk(asks[0][1] if asks else None, budget, kwargs)
