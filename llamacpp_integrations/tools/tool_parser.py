"""Split model output into reply text and tool calls, whole or while it streams.

One parser serves both: :func:`parse_tool_output` reads a finished answer, and
:class:`ToolCallStream` re-reads the growing answer after every delta and emits only what became
certain since the last one. The non-streamed result is the streamed one fed in a single piece,
so the two cannot disagree.

Grammars make the calls the package generates well-formed; the parser is still lenient in what it
reads (keys in any order, ``parameters`` for ``arguments``, arguments given as a JSON string,
text before or after the calls), and strict in what it returns: a call has a string name and an
object of arguments, or the whole answer raises :class:`ToolCallParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import ToolCallParseError
from .call_syntax import CallSyntax
from .tool_call_scan import (
    PartialCall,
    load_json,
    scan_call_object,
    scan_named_call,
    skip_json_ws,
)
from .tool_spec import ToolCall, ToolCallDelta, new_tool_call_id

__all__ = ["BegunCall", "ParsedOutput", "ToolCallStream", "parse_tool_output"]


@dataclass(frozen=True)
class ParsedOutput:
    """A finished answer: the reply text (markup of calls removed) and the calls."""

    content: str
    tool_calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class BegunCall:
    """A call an answer cut short had begun: its id, its name if written, its argument text."""

    id: str
    name: str | None
    arguments: str


@dataclass
class _Snapshot:
    content: str = ""
    calls: list[PartialCall] = field(default_factory=list)


# -- the whole answer ----------------------------------------------------------------------------


def _pending_prefix(text: str, pos: int, tokens: tuple[str, ...]) -> bool:
    """Whether ``text[pos:]`` (non-empty) could still grow into one of ``tokens``."""
    rest = text[pos:]
    return any(token.startswith(rest) and token != rest for token in tokens)


def _held_back(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``marker``."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


def _calls_start(text: str, pos: int, syntax: CallSyntax, final: bool) -> tuple[int, int] | None:
    """Where the calls start at or after ``pos``: (start of the markup, hold-back end).

    Returns ``(len(text), len(text) - held)`` when no calls start but the last ``held``
    characters could still become the opener.
    """
    if syntax.opener:
        found = text.find(syntax.opener, pos)
        if found >= 0:
            return found, found
        held = 0 if final else _held_back(text[pos:], syntax.opener)
        return None if not held else (len(text), len(text) - held)
    if pos > 0:  # markup-less syntaxes (llama3) call only at the start of the answer
        return None
    first = skip_json_ws(text, 0)
    if first < len(text) and re.match(syntax.start_pattern, text[first:]):
        return first, 0  # the blanks before the call are not a reply
    if not final and (first == len(text) or _pending_prefix(text, first, ("<|python_tag|>",))):
        return len(text), 0
    return None


def _snapshot(text: str, syntax: CallSyntax, *, final: bool) -> _Snapshot:
    snapshot = _Snapshot()
    pos = 0
    while True:
        found = _calls_start(text, pos, syntax, final)
        if found is None:
            snapshot.content += text[pos:]
            return snapshot
        start, emit_until = found
        snapshot.content += text[pos:emit_until]
        if start == len(text):
            return snapshot
        pos, n_before = start, len(snapshot.calls)
        pos, done = _read_calls(text, start, syntax, snapshot, final=final)
        if final and len(snapshot.calls) == n_before and not syntax.empty_allowed:
            raise ToolCallParseError(
                f"{syntax.opener or 'the answer'} is not followed by a tool call", position=start
            )
        if not done:
            return snapshot


def _read_calls(
    text: str, pos: int, syntax: CallSyntax, snapshot: _Snapshot, *, final: bool
) -> tuple[int, bool]:
    """Read calls from ``pos``; returns where they ended and whether the text goes on."""
    if syntax.lead.endswith("["):
        return _read_call_list(text, pos, syntax, snapshot, final=final)
    while True:
        pos, after_call_open = _skip_between(text, pos, syntax)
        if pos >= len(text):
            return pos, False
        if not final and _pending_prefix(text, pos, syntax.between):
            return pos, False
        call = PartialCall(start=pos)
        if syntax.named_args and after_call_open:
            scan_named_call(text, pos, call)
        elif not syntax.named_args and text[pos] == "{":
            scan_call_object(text, pos, call)
            call.raw = text[pos : call.end] if call.end is not None else ""
        else:
            return pos, True  # text after the calls
        snapshot.calls.append(call)
        if call.end is None:
            if final:
                raise ToolCallParseError("the tool call is not complete", position=pos)
            return len(text), False
        pos = call.end


def _expect(text: str, pos: int, token: str, what: str, *, final: bool) -> int | None:
    """Position after ``token`` at ``pos`` (after blanks); None while it may still come."""
    pos = skip_json_ws(text, pos)
    if text.startswith(token, pos):
        return pos + len(token)
    if not final and token.startswith(text[pos:]):
        return None
    raise ToolCallParseError(f"expected {what}", position=pos)


def _read_call_list(
    text: str, pos: int, syntax: CallSyntax, snapshot: _Snapshot, *, final: bool
) -> tuple[int, bool]:
    """``opener [call, call, ...] close``: the structure is checked, not skimmed."""
    opener_end = pos + len(syntax.opener)
    after = _expect(text, opener_end, "[", f"'[' after {syntax.opener}", final=final)
    if after is None:
        return len(text), False
    pos, n_calls = after, 0
    while True:
        pos = skip_json_ws(text, pos)
        if pos >= len(text):
            if final:
                raise ToolCallParseError("the list of tool calls is not closed", position=pos)
            return pos, False
        if text[pos] == "]" and n_calls == 0:
            if not syntax.empty_allowed:
                raise ToolCallParseError("the list of tool calls is empty", position=pos)
            break
        if text[pos] != "{":
            raise ToolCallParseError("expected a tool call object in the list", position=pos)
        call = PartialCall(start=pos)
        scan_call_object(text, pos, call)
        snapshot.calls.append(call)
        if call.end is None:
            if final:
                raise ToolCallParseError("the tool call is not complete", position=pos)
            return len(text), False
        call.raw = text[pos : call.end]
        n_calls += 1
        pos = skip_json_ws(text, call.end)
        if pos >= len(text):
            if final:
                raise ToolCallParseError("the list of tool calls is not closed", position=pos)
            return pos, False
        if text[pos] == ",":
            pos += 1
            continue
        if text[pos] != "]":
            raise ToolCallParseError("expected ',' or ']' after a tool call", position=pos)
        break
    pos += 1  # the "]"
    close = syntax.trail[1:]  # what follows the list's "]" ("</tool_call>" or nothing)
    if close:
        after = _expect(text, pos, close, f"{close} after the list", final=final)
        if after is None:
            return len(text), False
        pos = after
    return skip_json_ws(text, pos), True  # blanks between the list and a reply belong to neither


def _skip_between(text: str, pos: int, syntax: CallSyntax) -> tuple[int, bool]:
    """Skip whitespace and markup between calls; also say whether a call opener came last."""
    after_call_open = False
    while True:
        pos = skip_json_ws(text, pos)
        for token in syntax.between:
            if text.startswith(token, pos):
                pos += len(token)
                after_call_open = token == syntax.call_open
                break
        else:
            return pos, after_call_open


# -- results -------------------------------------------------------------------------------------


def _finished_call(call: PartialCall, call_id: str) -> ToolCall:
    if call.raw and not isinstance(load_json(call.raw, call.start), dict):
        raise ToolCallParseError("the tool call is not a JSON object", position=call.start)
    if call.name is None:
        raise ToolCallParseError("the tool call has no name", position=call.start)
    arguments_json = call.arguments if call.arguments_done else "{}"
    arguments = load_json(arguments_json, call.start)
    if not isinstance(arguments, dict):
        raise ToolCallParseError("the call's arguments are not an object", position=call.start)
    return ToolCall(id=call_id, name=call.name, arguments=arguments, arguments_json=arguments_json)


class ToolCallStream:
    """Feed the text deltas of one answer; get back reply text and tool-call deltas.

    Reply text that might be the start of a call marker is held back until it is not. A call
    is announced (index, id and name) as soon as its name is complete, then its argument text
    follows in pieces; the pieces of one call concatenate to its ``arguments_json``.
    """

    def __init__(self, syntax: CallSyntax) -> None:
        self.syntax = syntax
        self._text = ""
        self._content_sent = 0
        self._ids: list[str] = []
        self._arguments_sent: list[int] = []

    @property
    def text(self) -> str:
        return self._text

    def feed(self, delta: str) -> tuple[str, list[ToolCallDelta]]:
        """Add ``delta``; return the reply text and call deltas that became certain."""
        self._text += delta
        try:
            snapshot = _snapshot(self._text, self.syntax, final=False)
        except ToolCallParseError:
            return "", []  # reported, with its position, by ``finish``
        return self._emit(snapshot)

    def finish(self, last: str = "") -> tuple[str, list[ToolCallDelta], ParsedOutput]:
        """The answer is complete (``last``: its final piece, not fed): the last deltas and the
        parsed whole. The answer is read once here, so a whole answer needs no ``feed``.

        Raises:
            ToolCallParseError: the answer opens a call that is not well-formed.
        """
        self._text += last
        try:
            snapshot = _snapshot(self._text, self.syntax, final=True)
            for call in snapshot.calls:
                if call.name is None:
                    raise ToolCallParseError("the tool call has no name", position=call.start)
            content, deltas = self._emit(snapshot)
            calls = tuple(
                _finished_call(call, call_id)
                for call, call_id in zip(snapshot.calls, self._ids, strict=True)
            )
        except ToolCallParseError as error:
            error.partial_text = self._text
            raise
        return content, deltas, ParsedOutput(snapshot.content, calls)

    def finish_cut(
        self, last: str = ""
    ) -> tuple[str, list[ToolCallDelta], ParsedOutput, list[BegunCall]]:
        """The answer was cut short (``max_tokens``): the last deltas, the text and the calls
        it completed, and the calls it began but did not complete.

        Raises:
            ToolCallParseError: what came is not well-formed (not just unfinished).
        """
        self._text += last
        try:
            snapshot = _snapshot(self._text, self.syntax, final=False)
        except ToolCallParseError as error:
            error.partial_text = self._text
            raise
        content, deltas = self._emit(snapshot)
        complete: list[ToolCall] = []
        begun: list[BegunCall] = []
        for index, call in enumerate(snapshot.calls):
            call_id = self._ids[index] if index < len(self._ids) else new_tool_call_id()
            if call.end is not None and call.name is not None:
                complete.append(_finished_call(call, call_id))
            else:
                begun.append(BegunCall(call_id, call.name, call.arguments))
        return content, deltas, ParsedOutput(snapshot.content, tuple(complete)), begun

    def _emit(self, snapshot: _Snapshot) -> tuple[str, list[ToolCallDelta]]:
        content = snapshot.content[self._content_sent :]
        self._content_sent = len(snapshot.content)
        deltas: list[ToolCallDelta] = []
        for index, call in enumerate(snapshot.calls):
            if call.name is None:
                break  # later calls wait for this one's name, so indexes come in order
            # Arguments given as a JSON string are only known whole; a call without arguments
            # gets "{}" once it is complete.
            if call.raw_arguments_string and not call.arguments_done:
                arguments = ""
            elif call.end is not None and not call.arguments_done:
                arguments = "{}"
            else:
                arguments = call.arguments
            if index == len(self._ids):
                self._ids.append(new_tool_call_id())
                self._arguments_sent.append(0)
                deltas.append(ToolCallDelta(index, self._ids[index], call.name, arguments))
            elif len(arguments) > self._arguments_sent[index]:
                deltas.append(
                    ToolCallDelta(index, arguments=arguments[self._arguments_sent[index] :])
                )
            self._arguments_sent[index] = len(arguments)
        return content, deltas


def parse_tool_output(text: str, syntax: CallSyntax) -> ParsedOutput:
    """Parse a finished answer written in ``syntax``.

    Raises:
        ToolCallParseError: the answer opens a call that is not well-formed.
    """
    return ToolCallStream(syntax).finish(text)[2]
