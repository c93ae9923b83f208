"""Which recorded call answers a request, and why none does.

A request matches a recorded call of the same kind whose fingerprint is equal once the ignored
fields are dropped from both (``MatchOptions``). Generation calls are used up: identical
requests get the identical requests' recorded answers in the order they were recorded (a
sampled answer differs from one call to the next), and one more is unmatched unless
``allow_repeats``. The other calls (tokens, renders, counts, embeddings, scores) depend on
their request alone, so they replay as often as they are asked for.

When nothing matches, the error names the nearest recorded call of that kind (the fewest
differing fields) and the fields that differ, with both values.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import UnmatchedRequestError
from .cassette import Interaction

__all__ = ["GENERATION_KINDS", "MatchOptions", "Matcher"]

# Calls whose recorded answers are used up one by one.
GENERATION_KINDS = frozenset({"generate", "stream"})
SHOWN_DIFFERENCES = 6
SHOWN_CHARACTERS = 60


@dataclass(frozen=True)
class MatchOptions:
    """How strictly a replayed request must equal a recorded one.

    Attributes:
        ignore_seed: Match whatever the sampling seed.
        ignore_sampling: Match whatever the sampling settings (temperature, top-k...).
        ignore: More fields to leave out, as dotted paths into the fingerprint, e.g.
            ``"max_tokens"``, ``"prompt.chat.tools"``, ``"prompt.chat.messages.0.content"``.
        in_order: Generation calls take the recorded ones of their kind in order, whatever
            their requests (for prompts that change from run to run: a date, a random id).
        allow_repeats: Once every recorded answer to a generation request is used, replay the
            last one again instead of failing.
    """

    ignore_seed: bool = False
    ignore_sampling: bool = False
    ignore: tuple[str, ...] = ()
    in_order: bool = False
    allow_repeats: bool = False

    def ignored_paths(self) -> tuple[str, ...]:
        paths = list(self.ignore)
        if self.ignore_sampling:
            paths.append("sampling")
        elif self.ignore_seed:
            paths.append("sampling.seed")
        return tuple(paths)


class Matcher:
    """The recorded calls of one cassette, and which of them were replayed (thread-safe)."""

    def __init__(
        self,
        interactions: Iterable[Interaction],
        options: MatchOptions | None = None,
        *,
        where: str = "the cassette",
    ) -> None:
        self.options = options or MatchOptions()
        self._where = where
        self._lock = threading.Lock()
        self._recorded: list[Interaction] = []
        self._keys: list[str] = []
        self._used: list[bool] = []
        for interaction in interactions:
            self._append(interaction, used=False)

    def _append(self, interaction: Interaction, *, used: bool) -> None:
        self._recorded.append(interaction)
        self._keys.append(_key(self._projected(interaction.request)))
        self._used.append(used)

    def _projected(self, request: dict[str, Any]) -> dict[str, Any]:
        paths = self.options.ignored_paths()
        if not paths:
            return request
        out = copy.deepcopy(request)
        for path in paths:
            _drop(out, path.split("."))
        return out

    def add_played(self, interaction: Interaction) -> None:
        """A call recorded just now: it answered its request already, so it is used."""
        with self._lock:
            self._append(interaction, used=True)

    def find(self, kind: str, request: dict[str, Any]) -> Interaction | None:
        """The recorded call answering ``request`` (marking it used), or ``None``."""
        consumed = kind in GENERATION_KINDS
        with self._lock:
            if consumed and self.options.in_order:
                candidates = [i for i, done in enumerate(self._recorded) if done.kind == kind]
            else:
                key = _key(self._projected(request))
                candidates = [
                    i
                    for i, found in enumerate(self._recorded)
                    if found.kind == kind and self._keys[i] == key
                ]
            if not candidates:
                return None
            if not consumed:
                return self._recorded[candidates[0]]
            for i in candidates:
                if not self._used[i]:
                    self._used[i] = True
                    return self._recorded[i]
            if self.options.allow_repeats:
                return self._recorded[candidates[-1]]
            return None

    def unmatched(
        self, kind: str, request: dict[str, Any], request_id: str | None = None
    ) -> UnmatchedRequestError:
        """The error for a request nothing answers: the nearest recorded call and how it
        differs."""
        wanted = _flat(self._projected(request))
        with self._lock:
            same_kind = [(i, found) for i, found in enumerate(self._recorded) if found.kind == kind]
        head = f"no recorded {kind!r} call in {self._where} answers this request"
        hint = (
            "record it (pytest --llamacpp-record-mode=new_episodes, or all to record every "
            "call again), or match less strictly (MatchOptions: ignore_seed, ignore_sampling, "
            "ignore, in_order)"
        )
        if not same_kind:
            with self._lock:
                kinds = sorted({found.kind for found in self._recorded})
            recorded = ", ".join(kinds) if kinds else "no calls"
            return UnmatchedRequestError(
                f"{head}: it holds none of that kind (it has: {recorded}); {hint}",
                kind=kind,
                request_id=request_id,
            )
        scored = []
        for i, found in same_kind:
            differences = _differences(_flat(self._projected(found.request)), wanted)
            scored.append((len(differences), i, found, differences))
        _, index, nearest, differences = min(scored, key=lambda item: (item[0], item[1]))
        place = f"call {index + 1} of the cassette (line {index + 2})"
        if not differences:
            text = (
                f"{head}: every recorded answer to this exact request ({place} and any "
                "before it) was replayed already; pass allow_repeats=True to replay the last "
                f"again, or {hint}"
            )
        else:
            shown = "\n".join(f"  {line}" for line in differences[:SHOWN_DIFFERENCES])
            more = len(differences) - SHOWN_DIFFERENCES
            if more > 0:
                shown += f"\n  ... and {more} more"
            text = (
                f"{head}. The nearest recorded request, {place}, differs in "
                f"{len(differences)} field(s) (recorded -> requested):\n{shown}\n{hint}"
            )
        return UnmatchedRequestError(
            text,
            kind=kind,
            nearest=nearest.request,
            differences=tuple(differences),
            request_id=request_id,
        )


def _key(request: dict[str, Any]) -> str:
    return json.dumps(request, sort_keys=True, ensure_ascii=False)


def _drop(data: Any, path: list[str]) -> None:
    """Remove ``path`` (keys, or list indices as digits) from ``data`` where it exists."""
    head, rest = path[0], path[1:]
    if isinstance(data, dict):
        if head not in data:
            return
        if rest:
            _drop(data[head], rest)
        else:
            del data[head]
    elif isinstance(data, list) and head.isdigit() and int(head) < len(data):
        if rest:
            _drop(data[int(head)], rest)
        else:
            data[int(head)] = None


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of ``data`` under its dotted path."""
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(data, list) and data:
        out = {}
        for i, value in enumerate(data):
            out.update(_flat(value, f"{prefix}.{i}" if prefix else str(i)))
        return out
    return {prefix: data}


_ABSENT = object()


def _differences(recorded: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    lines = []
    for path in sorted(recorded.keys() | wanted.keys()):
        old, new = recorded.get(path, _ABSENT), wanted.get(path, _ABSENT)
        if old != new or type(old) is not type(new):
            lines.append(f"{path}: {_shown(old, new)} -> {_shown(new, old)}")
    return lines


def _shown(value: Any, other: Any) -> str:
    """``value`` short enough for a line; a long string is shown around where it first
    differs from ``other``."""
    if value is _ABSENT:
        return "(absent)"
    if not isinstance(value, str) or len(value) <= SHOWN_CHARACTERS:
        return json.dumps(value, ensure_ascii=False)
    start = 0
    if isinstance(other, str):
        start = next(
            (i for i, (a, b) in enumerate(zip(value, other, strict=False)) if a != b),
            min(len(value), len(other)),
        )
    begin = max(0, start - SHOWN_CHARACTERS // 3)
    piece = value[begin : begin + SHOWN_CHARACTERS]
    prefix = "..." if begin else ""
    suffix = "..." if begin + SHOWN_CHARACTERS < len(value) else ""
    return f"{prefix}{json.dumps(piece, ensure_ascii=False)}{suffix} (at character {start})"
