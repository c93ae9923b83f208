"""Which request fields the generation endpoints refuse, and which they ignore.

A field this server does not declare is judged here by name:

* refused with a 400 naming it, when it is set to ask for something: fields that would change
  the answer and cannot be honoured here (OpenAI's ``audio``, ``web_search_options``...), and
  the better-known extensions of other servers (llama-server's ``n_probs`` or ``mirostat``,
  vLLM's ``guided_json``...) whose silent loss would hand the caller an answer made without
  them. Each says what to send instead where there is something;
* ignored, when it changes nothing here (``IGNORED_CHAT_FIELDS``: ``user``, ``store``, a cache
  key...): clients send them unasked;
* any other field is ignored too, as llama-server ignores fields it does not know: clients
  configured for other OpenAI-compatible servers send their own extensions, and a strict server
  would refuse every such client for a field that usually changes nothing.

A refused field is allowed at the value that asks for nothing (``null``, ``false``, an empty
list or object, or its documented neutral value: ``modalities: ["text"]``, ``typical_p: 1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ApiError

__all__ = [
    "CHAT_REFUSED",
    "COMPLETION_REFUSED",
    "IGNORED_CHAT_FIELDS",
    "NOTHING",
    "Refused",
    "refuse_unhonoured",
]


NOTHING: tuple[object, ...] = (None, False, "", [], {})
"""The values that ask for nothing, whatever the field."""


def _same(value: object, neutral: object) -> bool:
    # ``True == 1`` in Python: a boolean is only ever the same as a boolean.
    if isinstance(value, bool) or isinstance(neutral, bool):
        return value is neutral
    return value == neutral


@dataclass(frozen=True)
class Refused:
    """Why a field is refused, and the values that ask for nothing (accepted)."""

    why: str
    neutral: tuple[object, ...] = NOTHING

    def asks_something(self, value: object) -> bool:
        """Whether ``value`` asks for what cannot be honoured."""
        return not any(_same(value, neutral) for neutral in self.neutral)


_NO_SAMPLER = "this server's sampler has no such stage"

_VENDOR_REFUSED: dict[str, Refused] = {
    "json_schema": Refused("send response_format {'type': 'json_schema', ...}"),
    "n_predict": Refused("send max_tokens"),
    "n_probs": Refused("send logprobs and top_logprobs", (*NOTHING, 0)),
    "ignore_eos": Refused("answers end at the model's end of turn"),
    "min_tokens": Refused("answers may end at any length", (*NOTHING, 0)),
    "repetition_penalty": Refused("send repeat_penalty", (*NOTHING, 1)),
    "reasoning_budget_tokens": Refused("send reasoning_budget", (*NOTHING, -1)),
    "thinking_budget_tokens": Refused("send reasoning_budget", (*NOTHING, -1)),
    "typical_p": Refused(_NO_SAMPLER, (*NOTHING, 1)),
    "mirostat": Refused(_NO_SAMPLER, (*NOTHING, 0)),
    "dynatemp_range": Refused(_NO_SAMPLER, (*NOTHING, 0)),
    "xtc_probability": Refused(_NO_SAMPLER, (*NOTHING, 0)),
    "dry_multiplier": Refused(_NO_SAMPLER, (*NOTHING, 0)),
    "top_n_sigma": Refused(_NO_SAMPLER, (*NOTHING, -1)),
    "samplers": Refused("the sampler order is fixed"),
    "guided_json": Refused("send response_format {'type': 'json_schema', ...}"),
    "guided_regex": Refused("send a grammar"),
    "guided_choice": Refused("send a grammar"),
    "guided_grammar": Refused("send grammar (GBNF)"),
    "best_of": Refused("send n (every answer comes back)", (*NOTHING, 1)),
    "use_beam_search": Refused("there is no beam search here"),
}
"""Other servers' extensions that would change the answer, not honoured here."""

CHAT_REFUSED: dict[str, Refused] = {
    "audio": Refused("answers are text only"),
    "modalities": Refused("answers are text only", (*NOTHING, ["text"])),
    "functions": Refused("deprecated by OpenAI: send tools"),
    "function_call": Refused("deprecated by OpenAI: send tool_choice"),
    "web_search_options": Refused("this server searches nothing"),
    "moderation": Refused("this server runs no moderation"),
    "verbosity": Refused("only the default, 'medium', is", (*NOTHING, "medium")),
    "add_generation_prompt": Refused("the assistant's turn is always opened", (None, True)),
    "continue_final_message": Refused("an answer always starts a new assistant turn"),
    **_VENDOR_REFUSED,
}
"""Chat completion fields refused when set, and why."""

COMPLETION_REFUSED: dict[str, Refused] = dict(_VENDOR_REFUSED)
"""Legacy completion fields refused when set (``echo`` and ``suffix`` are declared fields)."""

IGNORED_CHAT_FIELDS = (
    "user",
    "metadata",
    "store",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "prompt_cache_options",
    "prediction",
)
"""OpenAI chat fields accepted and ignored: they change nothing in the answer here (the prompt
cache is automatic; ``prediction`` only speeds an answer up where a server can use it)."""


def refuse_unhonoured(given: Mapping[str, object] | None, refused: Mapping[str, Refused]) -> None:
    """Refuse the first of the undeclared fields ``given`` that ``refused`` lists and that asks
    for something.

    Raises:
        ApiError: 400 ``unsupported_parameter``, naming the field and why.
    """
    for name, value in (given or {}).items():
        rule = refused.get(name)
        if rule is not None and rule.asks_something(value):
            raise ApiError(
                400,
                f"{name} is not supported: {rule.why}",
                "invalid_request_error",
                "unsupported_parameter",
                name,
            )
