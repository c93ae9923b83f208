"""One call's options: the adapter's defaults with the call's keyword arguments on top.

Both chat adapters read their per-call keywords here, so they accept the same names, refuse the
same mistakes with the same error (``UnknownOptionError``), and read ``response_format`` in the
same shapes.

A keyword that is not passed (or is passed as ``UNSET``) keeps the adapter's default; a keyword
passed as ``None`` means "none of it" (``NULLABLE_OPTIONS``): ``max_tokens=None`` is no limit (the
answer may run to the end of its sequence's context), ``timeout=None`` no time limit,
``stop=None`` no stop strings, ``seed=None`` a random seed. Options that have no "none"
(``temperature``, ``top_k``...) refuse ``None`` with ``InvalidRequestError``. This is httpx's
``USE_CLIENT_DEFAULT`` rule: the sentinel, not ``None``, says "not given".
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final, TypeVar

from pydantic import BaseModel

from ..engine import SamplingParams
from ..errors import InvalidRequestError, UnknownOptionError
from ..models.resolve import model_spec
from ..models.stores import store_defaults
from .settings import SAMPLING_SETTINGS

__all__ = [
    "CALL_OPTIONS",
    "NULLABLE_OPTIONS",
    "TOOL_OPTIONS",
    "UNSET",
    "CallOptions",
    "ResponseFormat",
    "Unset",
    "defaults_of",
    "or_default",
    "read_response_format",
]

T = TypeVar("T")


class Unset(enum.Enum):
    """The type of ``UNSET`` (an enum of one member, so type checkers narrow ``x is UNSET``)."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET
"""A call keyword's value for "not passed": the adapter's default applies. Passing it is the
same as leaving the keyword out; it lets code that forwards keywords say "not given" without
``None``, which is a value of its own (see the module docstring)."""


def or_default(value: T | Unset, default: T) -> T:
    """``value``, or ``default`` when it is ``UNSET``."""
    return default if value is UNSET else value


REQUEST_OPTIONS = (
    "max_tokens",
    "stop",
    "timeout",
    "logprobs",
    "top_logprobs",
    "chat_template",
    "reasoning",
    "reasoning_budget",
    "grammar",
    "template_kwargs",
    "lora",
)
TOOL_OPTIONS = (
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "allow_repeated_calls",
    "response_format",
)
CALL_OPTIONS = (*SAMPLING_SETTINGS, *REQUEST_OPTIONS, "model")
"""Keywords every call takes; chat calls also take ``TOOL_OPTIONS``."""

NULLABLE_OPTIONS = frozenset(
    {
        "max_tokens",  # no limit: to the end of the sequence's context
        "stop",  # no stop strings
        "timeout",  # no time limit
        "logprobs",  # no log-probabilities
        "top_logprobs",  # none beyond the chosen token's
        "chat_template",  # the model's own template
        "reasoning",  # the template's default
        "reasoning_budget",  # no budget
        "grammar",  # no grammar
        "template_kwargs",  # no extra template variables
        "lora",  # the engine's default LoRA scales
        "logit_bias",  # no bias
        "seed",  # a random seed
        "model",  # the adapter's model
        "tools",  # no tools
        "tool_choice",  # "auto"
        "response_format",  # free text
    }
)
"""Call keywords for which an explicit ``None`` means "none" (what each comment says); the
others (``temperature``, ``top_k``, ``parallel_tool_calls``...) refuse ``None``."""

_FALLBACKS: dict[str, Any] = {f.name: f.default for f in fields(SamplingParams)} | {
    "parallel_tool_calls": True,
    "allow_repeated_calls": False,
}
"""What an option is when neither the call nor the adapter's defaults name it."""


def defaults_of(adapter: object) -> dict[str, Any]:
    """An adapter's fields that calls may override, by name. Those the user left unset take
    what the model's store keeps with it (an ``ollama://`` model's stop words, temperature...)."""
    names = (*CALL_OPTIONS, "parallel_tool_calls", "allow_repeated_calls")
    values = {name: getattr(adapter, name) for name in names if hasattr(adapter, name)}
    if getattr(adapter, "base_url", None) is None:
        chosen: set[str] = getattr(adapter, "model_fields_set", set())
        stored = store_defaults(model_spec(getattr(adapter, "model", None))).sampling
        values |= {k: v for k, v in stored.items() if k in values and k not in chosen}
    return values


@dataclass(frozen=True)
class ResponseFormat:
    """A structured answer: JSON valid for ``schema``, or any JSON object when it is ``None``."""

    schema: Mapping[str, Any] | None


def read_response_format(value: object) -> ResponseFormat:
    """A ``response_format`` in any shape the frameworks use: a pydantic model class,
    ``{"type": "json_object"}`` (optionally with ``"schema"``), OpenAI's
    ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}``, or
    ``{"type": "json_schema", "schema": {...}}``."""
    if isinstance(value, type) and issubclass(value, BaseModel):
        return ResponseFormat(value.model_json_schema())
    if isinstance(value, Mapping):
        kind = value.get("type")
        if kind == "json_object":
            schema = value.get("schema")
            return ResponseFormat(schema if isinstance(schema, Mapping) else None)
        if kind == "json_schema":
            spec = value.get("json_schema", value.get("schema"))
            if isinstance(spec, Mapping):
                inner = spec.get("schema")
                # OpenAI wraps the schema with a name; a bare schema may be given too.
                return ResponseFormat(inner if isinstance(inner, Mapping) else spec)
    raise InvalidRequestError(
        "response_format must be a pydantic model class, {'type': 'json_object'} or "
        "{'type': 'json_schema', 'json_schema': {'schema': {...}}}"
    )


@dataclass(frozen=True)
class CallOptions:
    """Everything one call was asked for, defaults resolved.

    Attributes:
        sampling: The sampler settings.
        max_tokens: Most tokens to generate (``None``: to the end of the context).
        stop: Strings that end the answer.
        timeout: Seconds the request may take.
        logprobs: ``None`` for no log-probabilities, else how many top tokens per step.
        chat_template: A template replacing the model's own for this call.
        reasoning: Turn a reasoning model's thinking on or off through its template's switch
            (``None``: the template's default).
        reasoning_budget: Most tokens of thinking; then the engine ends the reasoning itself.
        grammar: A GBNF grammar (root rule ``root``) the answer must follow; not together with
            tools or a response format, which bring grammars of their own.
        template_kwargs: Extra variables for the chat template (llama-server's
            ``chat_template_kwargs``). A reasoning template's switch given here (Qwen3's
            ``enable_thinking``) counts as ``reasoning`` when that is not set; ``reasoning``
            wins where both are.
        tools: OpenAI-style tool dicts offered to the model (``None``: no tools).
        tool_choice: How tools must be used (any spelling ``normalize_tool_choice`` reads).
        parallel_tool_calls: Whether one answer may call several tools.
        allow_repeated_calls: Let a call repeat one already answered in the conversation (the
            loop guard keeps such calls out by default; see ``tools.loop_guard``).
        response_format: The structured answer asked for, if any.
        model: Another model to serve this one call.
        lora: LoRA adapters to answer with, by name (or id) with their scales (``{"sql":
            1.0}``; ``{}`` none); ``None`` takes the engine's default scales.
    """

    sampling: SamplingParams
    max_tokens: int | None
    stop: tuple[str, ...]
    timeout: float | None
    logprobs: int | None
    chat_template: str | None
    reasoning: bool | None = None
    reasoning_budget: int | None = None
    grammar: str | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    tools: tuple[Mapping[str, Any], ...] | None = None
    tool_choice: object = "auto"
    parallel_tool_calls: bool = True
    allow_repeated_calls: bool = False
    response_format: ResponseFormat | None = None
    model: str | None = None
    lora: Mapping[str | int, float] | None = None

    @classmethod
    def merge(
        cls,
        defaults: Mapping[str, Any],
        kwargs: Mapping[str, Any],
        *,
        owner: str,
        chat: bool = True,
    ) -> CallOptions:
        """``defaults`` (an adapter's fields, by name) overridden by a call's ``kwargs``.

        A keyword left out or passed as ``UNSET`` keeps the default; ``None`` means "none"
        (``NULLABLE_OPTIONS``: ``max_tokens=None`` is no limit). ``chat=False`` refuses tools
        and response formats (completion calls).

        Raises:
            UnknownOptionError: a keyword no call takes.
            InvalidRequestError: ``None`` for an option that has no "none", tools together with
                a response format, a grammar together with either, or a bad format or grammar.
        """
        accepted = (*CALL_OPTIONS, *TOOL_OPTIONS) if chat else CALL_OPTIONS
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise UnknownOptionError(
                f"unexpected arguments for {owner}: {', '.join(unknown)} (accepted: "
                f"{', '.join(sorted(accepted))})"
            )

        def pick(name: str) -> Any:
            value = kwargs.get(name, UNSET)
            if value is UNSET:
                return defaults.get(name, _FALLBACKS.get(name))
            if value is None and name not in NULLABLE_OPTIONS:
                raise InvalidRequestError(
                    f"{name}=None: {name} has no 'none'; leave it out (or pass UNSET) to keep "
                    "the default"
                )
            return value

        stop = pick("stop") or ()
        tools = pick("tools") or None
        response_format = pick("response_format")
        grammar = _grammar(pick("grammar"))
        if grammar is not None and (tools or response_format is not None):
            raise InvalidRequestError(
                "grammar cannot be used together with tools or response_format: they "
                "constrain the answer with grammars of their own"
            )
        tool_choice = pick("tool_choice")
        return cls(
            sampling=SamplingParams(**{name: pick(name) for name in SAMPLING_SETTINGS}),
            max_tokens=pick("max_tokens"),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            timeout=pick("timeout"),
            logprobs=(pick("top_logprobs") or 0) if pick("logprobs") else None,
            chat_template=pick("chat_template"),
            reasoning=pick("reasoning"),
            reasoning_budget=pick("reasoning_budget"),
            grammar=grammar,
            template_kwargs=_template_kwargs(pick("template_kwargs")),
            tools=_tool_dicts(tools),
            tool_choice="auto" if tool_choice is None else tool_choice,
            parallel_tool_calls=bool(pick("parallel_tool_calls")),
            allow_repeated_calls=bool(pick("allow_repeated_calls")),
            response_format=(
                None if response_format is None else read_response_format(response_format)
            ),
            # The adapter's own model is the binding's; only a call's override is an option.
            model=or_default(kwargs.get("model", UNSET), None),
            lora=_lora(pick("lora")),
        )


def _grammar(value: object) -> str | None:
    # Whether it parses is llama.cpp's to say: the engine raises InvalidRequestError for it.
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequestError("grammar must be a non-empty GBNF string with a 'root' rule")
    return value


def _lora(value: object) -> Mapping[str | int, float] | None:
    # Which names the engine has is the engine's to say (UnknownAdapterError).
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str | int) for k in value):
        raise InvalidRequestError(
            "lora must map LoRA adapter names (or ids) to scales, as {'sql': 1.0}"
        )
    return dict(value)


def _template_kwargs(value: object) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise InvalidRequestError("template_kwargs must be a mapping of variable names to values")
    return dict(value)


def _tool_dicts(tools: object) -> tuple[Mapping[str, Any], ...] | None:
    if not tools:
        return None
    if not isinstance(tools, Sequence) or isinstance(tools, str | bytes):
        raise InvalidRequestError("tools must be a list of tools")
    return tuple(tools)
