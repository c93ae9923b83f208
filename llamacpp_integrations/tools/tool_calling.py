"""Chat with tools: plan the engine request, and read the calls back from its answer.

:func:`plan_tool_request` turns a chat request plus tools and a tool choice into an engine
request: the prompt (by the template when it knows tools, by our instructions otherwise) and the
grammar that makes every call well-formed:

===============  =========================================  ====================================
tool_choice      template knows tools (native syntax)       template knows no tools (fallback)
===============  =========================================  ====================================
``none``         no tools shown, nothing parsed             no tools shown, nothing parsed
``auto``         free text; a lazy grammar takes over at    the answer is text without the call
                 the syntax's call marker                   marker, or calls (one grammar)
``required``     calls only, from the first token           calls only, from the first token
a tool name      one call of that tool only                 one call of that tool only
===============  =========================================  ====================================

Stop strings are dropped whenever calls may be generated: met inside a call they would cut it.
Running the plan is the caller's: ``read_tool_answer`` reads a whole answer, ``ToolAnswerReader``
a streamed one (``client`` runs plans on any engine).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..engine import (
    ChatRequest,
    Completion,
    InferenceEngine,
    StreamChunk,
    Timings,
    TokenLogprob,
    Usage,
)
from ..errors import OutputTruncatedError, ToolCallParseError
from ..prompts.chat_template import messages_to_dicts
from .call_syntax import TOOL_CALL_LIST, CallSyntax
from .loop_guard import CallKey, RepeatFilter, answered_calls
from .reasoning_grammar import answer_grammar, answer_trigger_prefix
from .tool_grammar import tool_calls_gbnf
from .tool_parser import ToolCallStream
from .tool_prompt import (
    TemplateToolSupport,
    detect_tool_support,
    fallback_history,
    native_history,
    with_tool_instructions,
)
from .tool_spec import (
    InvalidToolCall,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    ToolSpec,
    new_tool_call_id,
    normalize_tool_choice,
    normalize_tools,
)

__all__ = [
    "CutCalls",
    "ToolAnswerReader",
    "ToolCallPlan",
    "ToolCallResult",
    "ToolStreamChunk",
    "plan_tool_request",
    "read_tool_answer",
]

Tools = Sequence[ToolSpec | Mapping[str, Any]]


CutCalls = Literal["raise", "keep"]
"""What an answer cut by ``max_tokens`` inside its calls gives: ``OutputTruncatedError``, or
the calls it completed plus the one it began as an ``InvalidToolCall`` (the LangChain way)."""


@dataclass(frozen=True)
class ToolCallPlan:
    """An engine request ready to submit, and how to read its answer.

    ``syntax`` is ``None`` when no call can come back (``tool_choice="none"``); ``answered``
    holds the calls the loop guard keeps from being made again (see ``loop_guard``), ``None``
    where the guard is off (``allow_repeated_calls``, or a choice that demands calls).
    ``answer_schema`` is the JSON schema an answer without calls follows (``None``: free text).
    """

    request: ChatRequest
    syntax: CallSyntax | None
    tools: tuple[ToolSpec, ...]
    choice: ToolChoice
    native: bool
    answered: frozenset[CallKey] | None = None
    cut: CutCalls = "raise"
    answer_schema: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ToolCallResult:
    """A finished answer: reply text, calls (each naming an offered tool), and the completion.

    ``invalid_calls`` are calls ``max_tokens`` cut short (with ``cut="keep"``);
    ``repeats_prevented`` counts the repeated calls the loop guard dropped.
    """

    content: str
    tool_calls: tuple[ToolCall, ...]
    completion: Completion
    invalid_calls: tuple[InvalidToolCall, ...] = ()
    repeats_prevented: int = 0

    @property
    def finish_reason(self) -> str:
        """``"tool_calls"`` when the answer calls tools (``"length"`` when one was cut short),
        else the completion's reason."""
        return _finish_reason(self.completion.finish_reason, self.tool_calls, self.invalid_calls)

    @property
    def needs_answer(self) -> bool:
        """Every call of the answer was a repeat: it is to be continued with a reply."""
        return self.repeats_prevented > 0 and not self.tool_calls and not self.invalid_calls


@dataclass(frozen=True)
class ToolStreamChunk:
    """One streamed piece: reply text and call deltas. The last chunk has ``finish_reason``,
    ``usage``, ``timings``, every finished call in ``tool_calls``, the calls cut short in
    ``invalid_calls`` and the count of repeats the loop guard dropped. ``reasoning`` is the
    reasoning text a reasoning model wrote since the previous piece (kept out of ``text``;
    ``usage.reasoning_tokens`` counts it). ``logprobs`` are those of
    the tokens sampled since the previous piece (when the request asked for them), whether
    their text became reply text, call markup or arguments. ``stop_string`` (on the last
    piece) is the request's stop string that ended the answer."""

    request_id: str
    text: str
    tool_call_deltas: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    timings: Timings | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()
    invalid_calls: tuple[InvalidToolCall, ...] = ()
    repeats_prevented: int = 0
    reasoning: str = ""
    stop_string: str | None = None

    @classmethod
    def of_text(cls, chunk: StreamChunk) -> ToolStreamChunk:
        """A plain engine chunk (no tools in play) in this shape."""
        return cls(
            chunk.request_id,
            chunk.text,
            (),
            chunk.finish_reason,
            chunk.usage,
            chunk.timings,
            logprobs=chunk.logprobs,
            stop_string=chunk.stop_string,
        )


def plan_tool_request(
    engine: InferenceEngine,
    request: ChatRequest,
    tools: Tools,
    *,
    tool_choice: object = "auto",
    parallel_tool_calls: bool = True,
    support: TemplateToolSupport | None = None,
    allow_repeated_calls: bool = False,
    cut: CutCalls = "raise",
    answer_schema: Mapping[str, Any] | None = None,
) -> ToolCallPlan:
    """The engine request for ``request`` with ``tools`` offered under ``tool_choice``.

    ``support`` (from :func:`detect_tool_support`) may be passed to skip probing the template.
    In ``auto`` mode a call repeating one already answered in the conversation is not
    returned (the loop guard) unless ``allow_repeated_calls``. For a reasoning model (a
    request with ``reasoning`` set) the calls are constrained only after its reasoning.
    With ``answer_schema`` (a response format beside the tools) an answer that calls no tool
    is a JSON document following it; the grammar then holds from the first token, where
    without it a native syntax leaves text free until a call starts.

    Raises:
        InvalidRequestError: bad tools or tool choice (names the problem).
        SchemaNotSupportedError: a tool's parameter schema cannot be expressed as a grammar.
        ChatTemplateError: the model has no chat template.
    """
    specs = tuple(normalize_tools(tools))
    choice = normalize_tool_choice(tool_choice, specs)
    if support is None:
        support = detect_tool_support(engine, request.chat_template)
    messages = messages_to_dicts(request.messages)
    guard = choice.mode == "auto" and choice.name is None and not allow_repeated_calls
    answered = answered_calls(messages) if guard else None
    native = support.syntax is not None
    syntax = support.syntax or TOOL_CALL_LIST
    messages = native_history(messages, syntax) if native else fallback_history(messages)
    if choice.mode == "none":
        planned = replace(request, messages=messages, tools=None)
        return ToolCallPlan(planned, None, specs, choice, native, cut=cut)
    callable_tools = [t for t in specs if choice.name in (None, t.name)]
    parallel = parallel_tool_calls and choice.name is None
    if choice.must_call:
        answer_schema = None  # the answer is calls: there is no other to shape
    grammar = tool_calls_gbnf(
        callable_tools,
        syntax,
        parallel=parallel,
        allow_text=not native and not choice.must_call,
        answer_schema=answer_schema,
    )
    spec = request.reasoning
    after = "" if spec is None else answer_trigger_prefix(spec)
    lazy = native and not choice.must_call and answer_schema is None
    triggers = syntax.trigger_patterns(after) if lazy else ()
    if spec is not None and not triggers:
        grammar = answer_grammar(spec, grammar)
    if native:
        shown_tools: list[dict[str, Any]] | None = [t.to_openai() for t in specs]
    else:
        shown_tools = None
        messages = with_tool_instructions(messages, specs, choice, parallel)
    planned = replace(
        request,
        messages=messages,
        tools=shown_tools,
        grammar=grammar,
        grammar_triggers=triggers,
        stop=(),
        special=request.special or (native and syntax.special_markers),
    )
    return ToolCallPlan(planned, syntax, specs, choice, native, answered, cut, answer_schema)


# -- reading answers -----------------------------------------------------------------------------


def _finish_reason(
    engine_reason: str, calls: Sequence[ToolCall], invalid: Sequence[InvalidToolCall]
) -> str:
    if invalid:
        return "length"
    return "tool_calls" if calls else engine_reason


_CUT_BEFORE_CALL = "max_tokens ended the answer before its call began"


def _only_callable(plan: ToolCallPlan) -> str | None:
    """The one tool an answer that must call may call (a named choice, or a single tool
    offered), else ``None``."""
    if plan.choice.name is not None:
        return plan.choice.name
    if plan.choice.must_call and len(plan.tools) == 1:
        return plan.tools[0].name
    return None


@dataclass(frozen=True)
class _End:
    """How an answer ended: its last text and call deltas, its whole text, its calls, and the
    calls cut short."""

    text: str
    deltas: list[ToolCallDelta]
    content: str
    calls: tuple[ToolCall, ...]
    invalid: tuple[InvalidToolCall, ...]


def _end(
    plan: ToolCallPlan, stream: ToolCallStream, last: str, request_id: str, finish_reason: str
) -> _End:
    truncated = OutputTruncatedError(
        "max_tokens ended the answer inside its tool calls",
        request_id=request_id,
        partial_text=stream.text + last,
    )
    if finish_reason == "length" and plan.cut == "keep":
        text, deltas, parsed, begun = stream.finish_cut(last)
        # A call cut before its name was written is still known by name where only one tool
        # could be called (a named tool_choice): callers can then say which call was cut.
        name = _only_callable(plan)
        invalid = tuple(
            InvalidToolCall(c.id, c.name or name, c.arguments, "max_tokens ended the call early")
            for c in begun
        )
        if not invalid and not parsed.tool_calls and plan.choice.must_call:
            # Cut before the call's object began: still the call that had to come.
            invalid = (InvalidToolCall(new_tool_call_id(), name, "", _CUT_BEFORE_CALL),)
        end = _End(text, deltas, parsed.content, parsed.tool_calls, invalid)
    else:
        try:
            text, deltas, parsed = stream.finish(last)
        except ToolCallParseError as error:
            error.request_id = request_id
            if finish_reason == "length":
                raise truncated from error
            raise
        # Out of tokens after a call began, or where only calls may be written: the list may
        # be cut short even when what came so far parses, so it is not returned as whole.
        if finish_reason == "length" and (plan.choice.must_call or parsed.tool_calls):
            raise truncated
        end = _End(text, deltas, parsed.content, parsed.tool_calls, ())
    offered = {tool.name for tool in plan.tools}
    for call in end.calls:
        if call.name not in offered:
            raise ToolCallParseError(
                f"the model called {call.name!r}, which is not an offered tool",
                position=0,
                request_id=request_id,
                partial_text=stream.text,
            )
    return end


def read_tool_answer(plan: ToolCallPlan, completion: Completion) -> ToolCallResult:
    """The reply text and calls of a whole answer to ``plan.request`` (repeats of answered
    calls dropped, see ``loop_guard``).

    Raises:
        OutputTruncatedError: ``max_tokens`` ended the answer inside a call (``cut="raise"``).
        ToolCallParseError: the answer is not a valid call list (grammars rule this out).
    """
    if plan.syntax is None:
        return ToolCallResult(completion.text, (), completion)
    stream = ToolCallStream(plan.syntax)
    end = _end(plan, stream, completion.text, completion.request_id, completion.finish_reason)
    guard = RepeatFilter(plan.answered)
    _, calls = guard.finish(end.deltas, end.calls)
    return ToolCallResult(end.content, calls, completion, end.invalid, guard.prevented)


class ToolAnswerReader:
    """Turns the engine chunks of a streamed answer to ``plan.request`` into tool stream
    chunks: reply text and call deltas as they come, the finished calls at the end. Calls that
    could still be repeats of answered ones are held back, and dropped if they are."""

    def __init__(self, plan: ToolCallPlan) -> None:
        self._plan = plan
        self._stream = ToolCallStream(plan.syntax) if plan.syntax is not None else None
        self._guard = RepeatFilter(plan.answered)

    def read(self, chunk: StreamChunk) -> ToolStreamChunk | None:
        """The piece ``chunk`` adds (``None`` when it adds nothing to show yet)."""
        if self._stream is None:
            return ToolStreamChunk.of_text(chunk)
        if chunk.finish_reason is None:
            text, raw = self._stream.feed(chunk.text)
            deltas = self._guard.deltas(raw)
            if not (text or deltas or chunk.logprobs):
                return None
            return ToolStreamChunk(chunk.request_id, text, tuple(deltas), logprobs=chunk.logprobs)
        end = _end(self._plan, self._stream, chunk.text, chunk.request_id, chunk.finish_reason)
        deltas, calls = self._guard.finish(end.deltas, end.calls)
        return ToolStreamChunk(
            chunk.request_id,
            end.text,
            tuple(deltas),
            _finish_reason(chunk.finish_reason, calls, end.invalid),
            chunk.usage,
            chunk.timings,
            calls,
            chunk.logprobs,
            end.invalid,
            self._guard.prevented,
            stop_string=chunk.stop_string,
        )
