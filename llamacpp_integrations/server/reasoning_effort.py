"""OpenAI's reasoning efforts as the client core's reasoning switch and budget, the same for
chat completions (``reasoning_effort``) and the Responses API (``reasoning.effort``)."""

from __future__ import annotations

from typing import Literal

__all__ = ["EFFORT_SHARES", "ReasoningEffort", "reasoning_switch"]

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]

EFFORT_SHARES: dict[str, int] = {"low": 4, "medium": 2}
"""The thinking budget of an effort, as a part of the output limit: ``low`` thinks for up to a
quarter of it, ``medium`` for up to half. ``high`` and above set no budget of their own (a
forced answer still keeps its room, see ``tools.answer_room``)."""

_OFF_EFFORTS = frozenset({"none", "minimal"})


def reasoning_switch(
    effort: ReasoningEffort | None, limit: int | None
) -> tuple[bool | None, int | None]:
    """The reasoning switch and budget of ``effort``, for an answer of at most ``limit``
    tokens: ``(None, None)`` (the template's default) when no effort is given, off for
    ``none`` and ``minimal``, on with a share of ``limit`` for ``low`` and ``medium``
    (``EFFORT_SHARES``; no budget when there is no ``limit``), on without a budget for
    ``high`` and above. A model without reasoning ignores both."""
    if effort is None:
        return None, None
    if effort in _OFF_EFFORTS:
        return False, None
    share = EFFORT_SHARES.get(effort)
    return True, None if share is None or limit is None else limit // share
