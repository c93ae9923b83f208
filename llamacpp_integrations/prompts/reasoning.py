"""Reasoning models' output: the format their thinking takes, and splitting it from the answer.

Reasoning models (Qwen3, DeepSeek-R1 distills, QwQ, gpt-oss...) write their thinking before
the answer. A request that names its template's :class:`ReasoningFormat` (in a
:class:`ReasoningSpec`) gets its output split by the engine: ``StreamChunk.reasoning`` and
``Completion.reasoning`` beside the answer's ``text``, and the reasoning's tokens counted in
``Usage.reasoning_tokens``. Which format a template uses is found by
``tools.detect_reasoning``.

One reader serves whole and streamed output: :class:`ReasoningSplitter` takes the output a
piece at a time and returns what became certain since the last piece, and
:func:`split_reasoning` is the same reader fed the whole text at once, so the two cannot
disagree. Only text that may still turn out to be (or to border) a marker is held back: a
proper start of a marker, and whitespace that is dropped if a marker follows it.

The rules, per family:

* ``think-tags``: the reasoning is the text between the start and end markers (or from the
  start of the output when the prompt opened the reasoning), without the whitespace around
  it; the answer is what follows the end marker, leading whitespace dropped. The start marker
  counts only at the start of the output: output that opens any other way is all answer (the
  model skipped thinking), and a ``<think>`` in the middle of an answer is answer text. With
  no end marker by the end (``max_tokens`` cut the output) everything stays reasoning.
* ``gpt-oss`` (the harmony format): the output is messages, each a header naming its channel
  and a body up to ``<|end|>`` (or ``<|return|>``/``<|call|>``). Analysis bodies are the
  reasoning and final bodies the answer, framing in neither. Messages on other channels
  (commentary: tool calls and their preambles) are not reasoning; they go to the answer as
  written, framing included, for a tool-call parser to read. Text outside any message (a
  model that ignored the format) is answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum, auto
from typing import Literal

__all__ = [
    "HARMONY_ANSWER_PREFIX",
    "HARMONY_CHANNEL",
    "HARMONY_MESSAGE",
    "HARMONY_START",
    "HARMONY_STOPS",
    "ReasoningFamily",
    "ReasoningFormat",
    "ReasoningSpec",
    "ReasoningSplitter",
    "SplitterState",
    "forced_end",
    "opens_inside",
    "split_reasoning",
    "switched_on",
    "template_kwargs_for",
]

ReasoningFamily = Literal["think-tags", "gpt-oss"]


@dataclass(frozen=True)
class ReasoningFormat:
    """How a template's model writes its reasoning.

    Attributes:
        family: ``"think-tags"`` or ``"gpt-oss"``.
        start: What opens the reasoning (``"<think>"``; for gpt-oss the analysis channel's
            header, ``"<|channel|>analysis<|message|>"``).
        end: What closes it (``"</think>"``; for gpt-oss ``"<|end|>"``).
        starts_inside: The generation prompt (with reasoning on) already opens the reasoning,
            so the output starts inside it (DeepSeek-R1 distills end the prompt with
            ``<think>\\n``).
        switch: The template variable that turns reasoning on and off (Qwen3's
            ``enable_thinking``), or ``None``.
        default_on: Leaving ``switch`` unset renders the prompt it renders when true (Qwen3);
            false when the default is "off" (DeepSeek-V3.1) or neither (the prompt opens no
            reasoning, closes none, and the model may think or not).
        renders_history: Earlier reasoning given back on an assistant message (under
            ``history_field``) appears in the rendered prompt.
        history_field: The assistant message key the template reads earlier reasoning from
            (gpt-oss templates read ``thinking``).
        answer_start: gpt-oss: the final channel's header, which opens the answer.
    """

    family: ReasoningFamily
    start: str
    end: str
    starts_inside: bool = False
    switch: str | None = None
    default_on: bool = True
    renders_history: bool = False
    history_field: str = "reasoning_content"
    answer_start: str | None = None


@dataclass(frozen=True)
class ReasoningSpec:
    """A request's reasoning: split its output by ``format``, and think at most ``budget``
    tokens (``None``: no limit).

    ``enabled`` is what the request asked of the template's switch (``True``/``False``; for
    a chat request the engine sets the switch); ``None`` leaves the template's default. It
    decides whether the output starts inside the reasoning (``inside``). Once
    ``budget`` tokens are generated without the end marker, the engine writes the marker
    itself (``forced_end``) and the model goes on with its answer. For the gpt-oss family
    the output is read with its control tokens (``special``), which frame its channels.
    """

    format: ReasoningFormat
    enabled: bool | None = None
    budget: int | None = None

    @property
    def inside(self) -> bool:
        """The prompt opens the reasoning: the output starts inside it."""
        return opens_inside(self.format, self.enabled)

    @property
    def expected(self) -> bool:
        """Whether the model may think at all: not when the template's switch is off, by the
        request or by the template's default (rwkv-world and DeepSeek-V3.1 think only when
        asked; their default prompt opens no reasoning, or closes an empty one)."""
        return self.format.switch is None or switched_on(self.format, self.enabled)

    def splitter(self) -> ReasoningSplitter:
        """A reader of one output of this request."""
        return ReasoningSplitter(self.format, reasoning=self.enabled)


def template_kwargs_for(format: ReasoningFormat, reasoning: bool | None) -> dict[str, object]:
    """The template variables that turn reasoning on (``True``) or off (``False``); ``{}``
    for the template's default or a template without a switch."""
    if format.switch is None or reasoning is None:
        return {}
    return {format.switch: reasoning}


def forced_end(format: ReasoningFormat) -> str:
    """The text that closes the reasoning and leads into the answer."""
    if format.family == "gpt-oss":
        return f"{format.end}{HARMONY_ANSWER_PREFIX}{format.answer_start or ''}"
    return f"{format.end}\n\n"


# Harmony's framing tokens (gpt-oss). A message is
# ``<|start|>{role}<|channel|>{channel}<|message|>{body}<|end|>``; the first one of an answer
# comes without ``<|start|>assistant``, which the generation prompt already wrote.
HARMONY_START = "<|start|>"
HARMONY_CHANNEL = "<|channel|>"
HARMONY_MESSAGE = "<|message|>"
# What ends a message besides the format's own ``end``: the end of the whole answer and the
# end of a tool call. Both also end generation, but a caller may not have stopped on them.
HARMONY_STOPS = ("<|return|>", "<|call|>")
# What opens an answer message after the reasoning (its channel header follows).
HARMONY_ANSWER_PREFIX = "<|start|>assistant"


class _Mode(Enum):
    OPENING = auto()  # think-tags: not yet known whether the output opens with the start marker
    LEAD = auto()  # think-tags: inside the reasoning, its leading whitespace not yet passed
    THINKING = auto()  # think-tags: inside the reasoning
    ANSWER_LEAD = auto()  # think-tags: the answer's leading whitespace not yet passed
    ANSWER = auto()  # think-tags: the answer
    BETWEEN = auto()  # harmony: between messages
    ANALYSIS = auto()  # harmony: inside a reasoning body
    FINAL = auto()  # harmony: inside an answer body
    OTHER = auto()  # harmony: inside a body of another channel (kept whole in the answer)


_REASONING_MODES = (_Mode.THINKING, _Mode.ANALYSIS)
# Where the reader is once the output is known to be inside reasoning (before its first
# character is shown), or not yet known to be in either part.
_INSIDE_MODES = (_Mode.LEAD, _Mode.THINKING, _Mode.ANALYSIS)
_UNDECIDED_MODES = (_Mode.OPENING, _Mode.BETWEEN)

SplitterState = Literal["undecided", "reasoning", "answer"]


def _held_back(text: str, markers: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that is a proper start of one of ``markers``."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:size]):
                longest = size
                break
    return longest


def _first_of(text: str, markers: Sequence[str]) -> tuple[int, str] | None:
    """Where the earliest of ``markers`` occurs in ``text``, and which one."""
    found = [(at, marker) for marker in markers if (at := text.find(marker)) >= 0]
    return min(found, key=lambda hit: hit[0]) if found else None


def _is_proper_start(text: str, markers: Sequence[str]) -> bool:
    return any(marker.startswith(text) and marker != text for marker in markers)


def switched_on(format: ReasoningFormat, reasoning: bool | None) -> bool:
    """Whether reasoning is on for a request: as it asked (``reasoning``), else the
    template's default (``default_on``); a template without a switch is always on."""
    return format.default_on if reasoning is None or format.switch is None else reasoning


def opens_inside(format: ReasoningFormat, reasoning: bool | None) -> bool:
    """Whether the prompt opens the reasoning, so the output starts inside it: the template
    does so (``starts_inside``) with reasoning on (``switched_on``)."""
    return format.starts_inside and switched_on(format, reasoning)


class ReasoningSplitter:
    """Feed the text pieces of one output; get back (reasoning, answer) deltas.

    The deltas of each part concatenate to ``reasoning`` and ``answer``; after ``finish`` those
    are what ``split_reasoning`` gives for the whole output.

    ``reasoning`` is whether this request turned reasoning on or off through the template's
    switch (``template_kwargs_for``); ``None`` means the template's default. It only matters
    for templates whose prompt opens the reasoning when it is on: with it off, the output
    does not start inside the reasoning.
    """

    def __init__(self, format: ReasoningFormat, *, reasoning: bool | None = None) -> None:
        self.format = format
        self._inside = opens_inside(format, reasoning)
        self._harmony = format.family == "gpt-oss"
        if self._harmony:
            self._mode = _Mode.ANALYSIS if self._inside else _Mode.BETWEEN
            self._stops = (format.end, *HARMONY_STOPS, HARMONY_START)
        else:
            self._mode = _Mode.OPENING
        self._pending = ""
        self._reasoning: list[str] = []
        self._answer: list[str] = []
        self._done = False
        self._finished = False

    @property
    def reasoning(self) -> str:
        """The reasoning returned so far."""
        return "".join(self._reasoning)

    @property
    def answer(self) -> str:
        """The answer returned so far."""
        return "".join(self._answer)

    @property
    def state(self) -> SplitterState:
        """Which part the next text belongs to as far as is known: ``"undecided"`` before the
        output shows whether it opens reasoning (or between harmony messages)."""
        if self._mode in _INSIDE_MODES:
            return "reasoning"
        return "undecided" if self._mode in _UNDECIDED_MODES else "answer"

    @property
    def reasoning_done(self) -> bool:
        """True once no more reasoning can come (the answer began, or the output ended)."""
        return self._done

    def feed(self, text: str) -> tuple[str, str]:
        """Add a piece of output; return the (reasoning, answer) text that became certain."""
        if self._finished:
            raise ValueError("the output was already finished")
        self._pending += text
        return self._advance(final=False)

    def finish(self, last: str = "") -> tuple[str, str]:
        """The output is complete (``last``: its final piece, not fed): the rest of both."""
        if self._finished:
            raise ValueError("the output was already finished")
        self._pending += last
        deltas = self._advance(final=True)
        self._finished = self._done = True
        return deltas

    # -- the reader ------------------------------------------------------------------------------

    def _advance(self, *, final: bool) -> tuple[str, str]:
        n_reasoning, n_answer = len(self._reasoning), len(self._answer)
        step = self._step_harmony if self._harmony else self._step_tags
        while step(final):
            pass
        return "".join(self._reasoning[n_reasoning:]), "".join(self._answer[n_answer:])

    def _emit(self, mode: _Mode, text: str) -> None:
        if text:
            target = self._reasoning if mode in _REASONING_MODES else self._answer
            target.append(text)

    def _step_tags(self, final: bool) -> bool:
        """One move of the think-tags reader; False when it must wait for more text."""
        start, end, pending = self.format.start, self.format.end, self._pending
        if self._mode is _Mode.OPENING:
            opening = pending.lstrip()
            if opening.startswith(start):
                # Also when the prompt opened the reasoning: some models write the tag again.
                self._pending, self._mode = opening[len(start) :], _Mode.LEAD
            elif not final and start.startswith(opening):
                return False
            elif self._inside:
                self._mode = _Mode.LEAD
            else:
                self._mode, self._done = _Mode.ANSWER_LEAD, True
            return True
        if self._mode in (_Mode.LEAD, _Mode.ANSWER_LEAD):
            self._pending = pending.lstrip()
            if not self._pending and not final:
                return False
            self._mode = _Mode.THINKING if self._mode is _Mode.LEAD else _Mode.ANSWER
            return True
        if self._mode is _Mode.THINKING:
            at = pending.find(end)
            if at >= 0:
                self._emit(_Mode.THINKING, pending[:at].rstrip())
                self._pending = pending[at + len(end) :]
                self._mode, self._done = _Mode.ANSWER_LEAD, True
                return True
            # Trailing whitespace waits: it is dropped if the end marker follows it.
            certain = pending if final else pending[: len(pending) - _held_back(pending, (end,))]
            certain = certain.rstrip()
            self._emit(_Mode.THINKING, certain)
            self._pending = "" if final else pending[len(certain) :]
            return False
        # The answer: nothing in it is a marker any more, so all of it goes out at once.
        self._emit(_Mode.ANSWER, pending)
        self._pending = ""
        return False

    def _step_harmony(self, final: bool) -> bool:
        """One move of the harmony reader; False when it must wait for more text."""
        pending = self._pending
        if not pending:
            return False
        if self._mode is not _Mode.BETWEEN:
            return self._read_body(pending, final)
        openers = (HARMONY_START, HARMONY_CHANNEL)
        if pending.startswith(openers):
            at = pending.find(HARMONY_MESSAGE)
            if at < 0:
                # A header the output ended in the middle of is framing, not text.
                self._pending = "" if final else pending
                return False
            header = pending[: at + len(HARMONY_MESSAGE)]
            self._pending = pending[len(header) :]
            self._open_message(header)
            return True
        if not final and _is_proper_start(pending, openers):
            return False
        # Text outside any message: answer, up to the next header.
        found = _first_of(pending[1:], openers)
        cut = len(pending) if found is None else found[0] + 1
        if found is None and not final:
            cut -= _held_back(pending, openers)
        self._emit(_Mode.ANSWER, pending[:cut])
        self._pending = pending[cut:]
        return bool(self._pending)

    def _open_message(self, header: str) -> None:
        # The channel part is what the format names; a leading "<|start|>assistant" is only
        # the message's role, the same for every channel of the answer.
        channel = header
        if header.startswith(HARMONY_START) and HARMONY_CHANNEL in header:
            role = header[len(HARMONY_START) : header.index(HARMONY_CHANNEL)]
            if role == "assistant":
                channel = header[header.index(HARMONY_CHANNEL) :]
        if channel == self.format.start:
            self._mode = _Mode.ANALYSIS
        elif channel == self.format.answer_start:
            self._mode, self._done = _Mode.FINAL, True
        else:
            self._mode = _Mode.OTHER
            self._emit(_Mode.OTHER, header)

    def _read_body(self, pending: str, final: bool) -> bool:
        found = _first_of(pending, self._stops)
        if found is None:
            keep = len(pending) if final else len(pending) - _held_back(pending, self._stops)
            self._emit(self._mode, pending[:keep])
            self._pending = pending[keep:]
            return False
        at, stop = found
        self._emit(self._mode, pending[:at])
        if stop == HARMONY_START:  # a new message without an end: its header is read next
            self._pending = pending[at:]
        else:
            if self._mode is _Mode.OTHER:
                self._emit(_Mode.OTHER, stop)
            self._pending = pending[at + len(stop) :]
        self._mode = _Mode.BETWEEN
        return True


def split_reasoning(
    format: ReasoningFormat, text: str, *, reasoning: bool | None = None
) -> tuple[str, str]:
    """(reasoning, answer) of a whole output; the same as feeding it all and finishing."""
    return ReasoningSplitter(format, reasoning=reasoning).finish(text)
