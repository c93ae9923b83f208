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
from typing import Any

from ..engine import (
    ChatRequest,
    Completion,
    InferenceEngine,
    StreamChunk,
    Timings,
    TokenLogprob,
    Usage,
)
from ..engine.chat_template import messages_to_dicts
from ..errors import OutputTruncatedError, ToolCallParseError
from .call_syntax import TOOL_CALL_LIST, CallSyntax
from .tool_grammar import tool_calls_gbnf
from .tool_parser import ParsedOutput, ToolCallStream
from .tool_prompt import (
    TemplateToolSupport,
    detect_tool_support,
    fallback_history,
    native_history,
    with_tool_instructions,
)
from .tool_spec import (
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    ToolSpec,
    normalize_tool_choice,
    normalize_tools,
)

__all__ = [
    "ToolAnswerReader",
    "ToolCallPlan",
    "ToolCallResult",
    "ToolStreamChunk",
    "plan_tool_request",
    "read_tool_answer",
]

Tools = Sequence[ToolSpec | Mapping[str, Any]]


@dataclass(frozen=True)
class ToolCallPlan:
    """An engine request ready to submit, and how to read its answer.

    ``syntax`` is ``None`` when no call can come back (``tool_choice="none"``).
    """

    request: ChatRequest
    syntax: CallSyntax | None
    tools: tuple[ToolSpec, ...]
    choice: ToolChoice
    native: bool


@dataclass(frozen=True)
class ToolCallResult:
    """A finished answer: reply text, calls (each naming an offered tool), and the completion."""

    content: str
    tool_calls: tuple[ToolCall, ...]
    completion: Completion

    @property
    def finish_reason(self) -> str:
        """``"tool_calls"`` when the answer calls tools, else the completion's reason."""
        return "tool_calls" if self.tool_calls else self.completion.finish_reason


@dataclass(frozen=True)
class ToolStreamChunk:
    """One streamed piece: reply text and call deltas. The last chunk has ``finish_reason``,
    ``usage``, ``timings`` and every finished call in ``tool_calls``. ``logprobs`` are those of
    the tokens sampled since the previous piece (when the request asked for them), whether
    their text became reply text, call markup or arguments."""

    request_id: str
    text: str
    tool_call_deltas: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    timings: Timings | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()

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
        )


def plan_tool_request(
    engine: InferenceEngine,
    request: ChatRequest,
    tools: Tools,
    *,
    tool_choice: object = "auto",
    parallel_tool_calls: bool = True,
    support: TemplateToolSupport | None = None,
) -> ToolCallPlan:
    """The engine request for ``request`` with ``tools`` offered under ``tool_choice``.

    ``support`` (from :func:`detect_tool_support`) may be passed to skip probing the template.

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
    native = support.syntax is not None
    syntax = support.syntax or TOOL_CALL_LIST
    messages = native_history(messages, syntax) if native else fallback_history(messages)
    if choice.mode == "none":
        planned = replace(request, messages=messages, tools=None)
        return ToolCallPlan(planned, None, specs, choice, native)
    callable_tools = [t for t in specs if choice.name in (None, t.name)]
    parallel = parallel_tool_calls and choice.name is None
    grammar = tool_calls_gbnf(
        callable_tools, syntax, parallel=parallel, allow_text=not native and not choice.must_call
    )
    triggers = syntax.trigger_patterns() if native and not choice.must_call else ()
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
    return ToolCallPlan(planned, syntax, specs, choice, native)


# -- reading answers -----------------------------------------------------------------------------


def _finish(
    plan: ToolCallPlan, stream: ToolCallStream, last: str, request_id: str, finish_reason: str
) -> tuple[str, list[ToolCallDelta], ParsedOutput]:
    truncated = OutputTruncatedError(
        "max_tokens ended the answer inside its tool calls",
        request_id=request_id,
        partial_text=stream.text,
    )
    try:
        content, deltas, parsed = stream.finish(last)
    except ToolCallParseError as error:
        error.request_id = request_id
        if finish_reason == "length":
            raise truncated from error
        raise
    # Out of tokens after a call began, or where only calls may be written: the list may
    # be cut short even when what came so far parses, so it is not returned as whole.
    if finish_reason == "length" and (plan.choice.must_call or parsed.tool_calls):
        raise truncated
    offered = {tool.name for tool in plan.tools}
    for call in parsed.tool_calls:
        if call.name not in offered:
            raise ToolCallParseError(
                f"the model called {call.name!r}, which is not an offered tool",
                position=0,
                request_id=request_id,
                partial_text=stream.text,
            )
    return content, deltas, parsed


def read_tool_answer(plan: ToolCallPlan, completion: Completion) -> ToolCallResult:
    """The reply text and calls of a whole answer to ``plan.request``.

    Raises:
        OutputTruncatedError: ``max_tokens`` ended the answer inside a call.
        ToolCallParseError: the answer is not a valid call list (grammars rule this out).
    """
    if plan.syntax is None:
        return ToolCallResult(completion.text, (), completion)
    stream = ToolCallStream(plan.syntax)
    _, _, parsed = _finish(
        plan, stream, completion.text, completion.request_id, completion.finish_reason
    )
    return ToolCallResult(parsed.content, parsed.tool_calls, completion)


class ToolAnswerReader:
    """Turns the engine chunks of a streamed answer to ``plan.request`` into tool stream
    chunks: reply text and call deltas as they come, the finished calls at the end."""

    def __init__(self, plan: ToolCallPlan) -> None:
        self._plan = plan
        self._stream = ToolCallStream(plan.syntax) if plan.syntax is not None else None

    def read(self, chunk: StreamChunk) -> ToolStreamChunk | None:
        """The piece ``chunk`` adds (``None`` when it adds nothing to show yet)."""
        if self._stream is None:
            return ToolStreamChunk.of_text(chunk)
        if chunk.finish_reason is None:
            text, deltas = self._stream.feed(chunk.text)
            if not (text or deltas or chunk.logprobs):
                return None
            return ToolStreamChunk(chunk.request_id, text, tuple(deltas), logprobs=chunk.logprobs)
        text, deltas, parsed = _finish(
            self._plan, self._stream, chunk.text, chunk.request_id, chunk.finish_reason
        )
        return ToolStreamChunk(
            chunk.request_id,
            text,
            tuple(deltas),
            "tool_calls" if parsed.tool_calls else chunk.finish_reason,
            chunk.usage,
            chunk.timings,
            parsed.tool_calls,
            chunk.logprobs,
        )
