"""The loop guard: in ``auto`` mode, no call may repeat one whose result the model already has.

Small local models in agent loops call the same tool with the same arguments after every
result, until an iteration limit ends the run. A call is a *repeat* when its tool and its
arguments (compared as canonical JSON: keys sorted, integral numbers as integers) equal those of
an earlier call answered by a tool message in the conversation.

How it is enforced, in the order an answer is read:

* streamed, a call's pieces are held back while the call could still turn out to be a repeat
  (its name is that of an answered call and its arguments so far agree with that call's); they
  are released as soon as it cannot, so streaming stays incremental;
* a repeat is dropped from the answer (later calls are renumbered), and so is a call that
  repeats an earlier call of the same answer;
* when every call of an answer was a repeat, the answer is continued from where its calls began
  with a grammar that admits no call, so the model answers instead (``follow_up_request``).

``allow_repeated_calls`` (per adapter or per call) turns it off, for tools meant to be polled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine import ChatRequest, CompletionRequest
from ..prompts.media import images_in
from .call_syntax import TOOL_CALL_LIST, CallSyntax
from .grammar import GrammarRules, schema_rule
from .grammar.gbnf import seq
from .partial_json import parse_partial_json
from .tool_grammar import answer_text_rule
from .tool_prompt import calls_of
from .tool_spec import ToolCall, ToolCallDelta

__all__ = [
    "CallKey",
    "RepeatFilter",
    "answered_calls",
    "call_key",
    "canonical_arguments",
    "follow_up_request",
]

CallKey = tuple[str, str]
"""A call's tool name and its arguments as canonical JSON."""


def _canonical(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def canonical_arguments(arguments: Any) -> str:
    """Arguments as canonical JSON text (equal arguments, equal text)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return str(arguments)
    return json.dumps(_canonical(arguments), sort_keys=True, separators=(",", ":"))


def call_key(name: str, arguments: Any) -> CallKey:
    return name, canonical_arguments(arguments)


def answered_calls(messages: Sequence[Mapping[str, Any]]) -> frozenset[CallKey]:
    """The calls of the conversation whose results it already holds: an assistant's call is
    answered by a later tool message with its id (or, for calls without ids, by any)."""
    answered: set[CallKey] = set()
    pending: dict[str | None, list[CallKey]] = {}
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            for call_id, name, arguments in calls_of(message):
                pending.setdefault(call_id, []).append(call_key(name, arguments))
        elif message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            keys = pending.pop(call_id, None) if call_id is not None else None
            answered.update(keys or pending.pop(None, []))
    return frozenset(answered)


def _agrees(partial: Any, answered: Any) -> bool:
    """Whether a value still being written can turn out equal to ``answered``."""
    if isinstance(partial, str):
        return isinstance(answered, str) and answered.startswith(partial)
    if isinstance(partial, bool) or partial is None:
        return bool(partial == answered)
    if isinstance(partial, int | float):
        # A number may still grow digits: compare its text as a prefix.
        return (
            isinstance(answered, int | float)
            and not isinstance(answered, bool)
            and (canonical_arguments(answered).startswith(canonical_arguments(partial)))
        )
    if isinstance(partial, dict):
        return isinstance(answered, dict) and all(
            key in answered and _agrees(value, answered[key]) for key, value in partial.items()
        )
    if isinstance(partial, list):
        return (
            isinstance(answered, list)
            and len(partial) <= len(answered)
            and all(_agrees(a, b) for a, b in zip(partial, answered, strict=False))
        )
    return False


def _could_repeat(name: str, arguments_text: str, answered: frozenset[CallKey]) -> bool:
    candidates = [json.loads(args) for tool, args in answered if tool == name]
    if not candidates:
        return False
    try:
        partial = parse_partial_json(arguments_text) if arguments_text.strip() else {}
    except ValueError:
        return True  # not readable yet: hold it rather than show what may be dropped
    return any(_agrees(partial, candidate) for candidate in candidates)


@dataclass
class _Call:
    name: str
    call_id: str | None
    arguments: str = ""
    shown_as: int | None = None  # the index the caller sees, once shown
    sent: int = 0  # argument characters shown
    dropped: bool = False


def _whole_key(call: _Call) -> CallKey | None:
    """The call's key once its arguments are whole JSON (``None`` before)."""
    try:
        return call_key(call.name, json.loads(call.arguments))
    except json.JSONDecodeError:
        return None


@dataclass
class RepeatFilter:
    """Call deltas and finished calls of one answer with repeats of ``answered`` held back,
    then dropped. ``prevented`` counts the repeats dropped. With ``answered`` ``None`` (the
    guard off) every call passes as written.

    Calls are shown in the order they were written: while one is held, the ones after it are
    held too, so the indexes the caller sees match the finished calls' order.
    """

    answered: frozenset[CallKey] | None
    prevented: int = 0
    _calls: dict[int, _Call] = field(default_factory=dict)
    _shown: int = 0

    def deltas(self, deltas: Sequence[ToolCallDelta]) -> list[ToolCallDelta]:
        """The deltas that may be shown now (a held call comes out whole once it may)."""
        self._add(deltas)
        return self._flush(drop=None)

    def finish(
        self, deltas: Sequence[ToolCallDelta], calls: Sequence[ToolCall]
    ) -> tuple[list[ToolCallDelta], tuple[ToolCall, ...]]:
        """The last deltas and the answer's calls, repeats dropped (the rest shown). A call
        that repeats an earlier call of the same answer is dropped too."""
        self._add(deltas)
        if self.answered is None:
            return self._flush(drop=set()), tuple(calls)
        seen = set(self.answered)
        drop: set[int] = set()
        for index, call in enumerate(calls):
            key = call_key(call.name, call.arguments)
            if key in seen:
                drop.add(index)
            seen.add(key)
        self.prevented += len(drop)
        kept = tuple(call for i, call in enumerate(calls) if i not in drop)
        return self._flush(drop=drop), kept

    def _add(self, deltas: Sequence[ToolCallDelta]) -> None:
        for delta in deltas:
            call = self._calls.get(delta.index)
            if call is None:
                call = self._calls[delta.index] = _Call(delta.name or "", delta.id)
            call.arguments += delta.arguments

    def _flush(self, drop: set[int] | None) -> list[ToolCallDelta]:
        """Show what may be shown; ``drop`` (at the end) names the repeats."""
        out: list[ToolCallDelta] = []
        earlier: set[CallKey] = set()  # the answer's own calls so far: no call twice either
        for index in sorted(self._calls):
            call = self._calls[index]
            forbidden = frozenset() if self.answered is None else self.answered | earlier
            key = _whole_key(call)
            if key is not None:
                earlier.add(key)
            if call.dropped:
                continue
            if call.shown_as is None:
                if drop is not None and index in drop:
                    call.dropped = True
                    continue
                if drop is None and _could_repeat(call.name, call.arguments, forbidden):
                    break  # hold it, and every call after it
                call.shown_as, call.sent = self._shown, len(call.arguments)
                self._shown += 1
                out.append(ToolCallDelta(call.shown_as, call.call_id, call.name, call.arguments))
            elif len(call.arguments) > call.sent:
                out.append(ToolCallDelta(call.shown_as, arguments=call.arguments[call.sent :]))
                call.sent = len(call.arguments)
        return out


def follow_up_request(
    request: ChatRequest,
    syntax: CallSyntax,
    *,
    prompt: str,
    answer_so_far: str,
    generated_tokens: int,
    answer_schema: Mapping[str, Any] | None = None,
) -> CompletionRequest | None:
    """The answer's continuation with no call allowed: ``prompt`` (the request rendered), the
    reply text already given, and a grammar for a text reply (with ``answer_schema``, a JSON
    document following it). ``None`` when ``max_tokens`` leaves no room.

    The fallback syntax states "no call" as the empty list, so that is what the continuation
    starts from; native syntaxes continue the reply text before the calls.
    """
    budget = None if request.max_tokens is None else request.max_tokens - generated_tokens
    if budget is not None and budget < 1:
        return None
    rules = GrammarRules()
    rules.fixed("ws")
    if answer_schema is not None:
        # Nothing but the document: the calls' grammar left no room for text before it.
        opened = f"{syntax.lead}{syntax.trail}" if syntax is TOOL_CALL_LIST else ""
        text = prompt + opened
        root = rules.add("answer", seq("ws", schema_rule(rules, answer_schema, "document")))
    elif syntax is TOOL_CALL_LIST:
        opened = f"{syntax.lead}{syntax.trail}"  # "<tool_call>[]</tool_call>"
        text = prompt + opened
        root = answer_text_rule(rules, syntax, lead_blank=True)
    else:
        text = prompt + answer_so_far
        # Nothing said yet: the continuation must say something.
        root = answer_text_rule(rules, syntax, lead_blank=not answer_so_far.strip())
    return CompletionRequest(
        prompt=text,
        images=images_in(request.messages),
        sampling=request.sampling,
        max_tokens=budget,
        grammar=rules.render(root),
        timeout=request.timeout,
        logprobs=request.logprobs,
        request_id=request.request_id + "-answer",
    )
