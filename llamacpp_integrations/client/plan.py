"""One plan for every kind of call: plain text, structured output, or tools.

``plan_call`` turns a request and its ``CallOptions`` into a ``CallPlan``: the engine request to
run and how to read its answer, whole (``CallPlan.read``) or streamed (``CallPlan.reader``).
Every executor (``execute.py``) and every adapter reads answers through these, so the three
kinds behave the same whichever way they are run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..engine import (
    ChatMessage,
    ChatRequest,
    Completion,
    CompletionRequest,
    ImageInput,
    InferenceEngine,
    StreamChunk,
)
from ..errors import InvalidRequestError, OutputTruncatedError
from ..multimodal import ImagePolicy, image_reader_for
from ..tools import (
    CutCalls,
    InvalidToolCall,
    TemplateToolSupport,
    ToolAnswerReader,
    ToolCall,
    ToolCallPlan,
    ToolSpec,
    ToolStreamChunk,
    constrain,
    plan_tool_request,
    read_structured,
    read_tool_answer,
)
from .options import CallOptions

__all__ = [
    "CallPlan",
    "CallResult",
    "ChunkReader",
    "chat_plan_factory",
    "plan_call",
    "request_of",
    "structured_plan",
    "tool_plan",
]

ImageReader = Callable[[Any], ImageInput]
"""Reads an image source (a framework's image block's data, path or URL) into pixels."""

CutJson = Literal["raise", "keep"]
"""What a structured call does when ``max_tokens`` cuts its JSON: raise
``OutputTruncatedError``, or keep the text (with ``finish_reason="length"``) for a lenient
parser to read."""

SupportFor = Callable[[InferenceEngine, str | None], TemplateToolSupport]
"""Finds (and may cache) what a chat template knows about tools."""


@dataclass(frozen=True)
class CallResult:
    """A whole answer: its text, tool calls, parsed value (structured calls), and the engine's
    completion (usage, timings, log-probabilities); the calls ``max_tokens`` cut short and
    the count of repeated calls the loop guard kept out."""

    content: str
    tool_calls: tuple[ToolCall, ...]
    completion: Completion
    value: Any = None
    invalid_calls: tuple[InvalidToolCall, ...] = ()
    repeats_prevented: int = 0

    @property
    def finish_reason(self) -> str:
        """``"tool_calls"`` when the answer calls tools (``"length"`` when one was cut short),
        else the completion's reason."""
        if self.invalid_calls:
            return "length"
        return "tool_calls" if self.tool_calls else self.completion.finish_reason


class ChunkReader:
    """Reads one streamed answer: engine chunks in, ``ToolStreamChunk`` s out (text, call
    deltas, and on the last one the finish reason, usage and finished calls)."""

    def __init__(self, tools: ToolCallPlan | None, structured: bool, cut_json: CutJson) -> None:
        self._tools = None if tools is None else ToolAnswerReader(tools)
        self._structured = structured and cut_json == "raise"
        self._text: list[str] = []

    def read(self, chunk: StreamChunk) -> ToolStreamChunk | None:
        """The piece ``chunk`` adds, ``None`` when there is nothing new to show.

        Raises:
            OutputTruncatedError: ``max_tokens`` cut a call, or a structured answer whose plan
                says so.
        """
        if self._tools is not None:
            return self._tools.read(chunk)
        if self._structured:
            self._text.append(chunk.text)
            if chunk.finish_reason == "length":
                raise OutputTruncatedError(
                    "max_tokens ended the JSON answer early",
                    request_id=chunk.request_id,
                    partial_text="".join(self._text),
                )
        if not chunk.text and not chunk.logprobs and chunk.finish_reason is None:
            return None
        return ToolStreamChunk.of_text(chunk)


@dataclass(frozen=True)
class CallPlan:
    """The engine request of a call, and how its answer is read."""

    request: ChatRequest | CompletionRequest
    tools: ToolCallPlan | None = None
    structured: bool = False
    cut_json: CutJson = "raise"

    def read(self, completion: Completion) -> CallResult:
        """The whole answer (see ``ChunkReader.read`` for what raises)."""
        if self.tools is not None:
            result = read_tool_answer(self.tools, completion)
            return CallResult(
                result.content,
                result.tool_calls,
                completion,
                invalid_calls=result.invalid_calls,
                repeats_prevented=result.repeats_prevented,
            )
        if self.structured and (self.cut_json == "raise" or completion.finish_reason != "length"):
            return CallResult(completion.text, (), completion, read_structured(completion).value)
        return CallResult(completion.text, (), completion)

    def reader(self) -> ChunkReader:
        """A reader for one streamed answer to ``request``."""
        return ChunkReader(self.tools, self.structured, self.cut_json)


def structured_plan(
    request: ChatRequest | CompletionRequest,
    schema: Mapping[str, Any] | None,
    *,
    cut_json: CutJson = "raise",
) -> CallPlan:
    """A call whose answer is JSON valid for ``schema`` (``None``: any JSON object); its
    ``CallResult.value`` is the parsed value."""
    return CallPlan(constrain(request, schema), structured=True, cut_json=cut_json)


def tool_plan(
    engine: InferenceEngine,
    request: ChatRequest,
    tools: Sequence[ToolSpec | Mapping[str, Any]],
    *,
    tool_choice: object = "auto",
    parallel_tool_calls: bool = True,
    support: TemplateToolSupport | None = None,
    allow_repeated_calls: bool = False,
    cut_calls: CutCalls = "raise",
) -> CallPlan:
    """A call that may (or, per ``tool_choice``, must) call ``tools``; see
    ``tools.plan_tool_request`` for how the prompt and grammar are made, and
    ``tools.loop_guard`` for what happens to repeated calls."""
    planned = plan_tool_request(
        engine,
        request,
        tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel_tool_calls,
        support=support,
        allow_repeated_calls=allow_repeated_calls,
        cut=cut_calls,
    )
    return CallPlan(planned.request, tools=planned)


def plan_call(
    engine: InferenceEngine,
    request: ChatRequest | CompletionRequest,
    options: CallOptions,
    support_for: SupportFor,
    *,
    cut_json: CutJson = "raise",
    cut_calls: CutCalls = "raise",
) -> CallPlan:
    """The plan for ``request`` under ``options`` (its tools or response format).

    Raises:
        InvalidRequestError: tools on a raw completion, or bad tools.
        SchemaNotSupportedError: a schema no grammar here can express.
    """
    if options.tools is not None:
        if not isinstance(request, ChatRequest):
            raise InvalidRequestError("tools need a chat request")
        return tool_plan(
            engine,
            request,
            options.tools,
            tool_choice=options.tool_choice,
            parallel_tool_calls=options.parallel_tool_calls,
            support=support_for(engine, request.chat_template),
            allow_repeated_calls=options.allow_repeated_calls,
            cut_calls=cut_calls,
        )
    if options.response_format is not None:
        return structured_plan(request, options.response_format.schema, cut_json=cut_json)
    return CallPlan(request)


def chat_plan_factory(
    engine: InferenceEngine,
    options: CallOptions,
    messages_of: Callable[[ImageReader | None], Sequence[ChatMessage | Mapping[str, Any]]],
    *,
    image_policy: ImagePolicy,
    support_for: SupportFor,
    cut_json: CutJson = "raise",
    cut_calls: CutCalls = "raise",
) -> Callable[[], CallPlan]:
    """What builds a chat call's plan: ``messages_of`` translates the framework's messages,
    reading their images with the reader ``image_policy`` allows. Async executors run it on a
    thread, since reading images (maybe fetching them) and planning are slow."""

    def build() -> CallPlan:
        messages = messages_of(image_reader_for(engine.info, image_policy))
        request = request_of(options, messages=messages)
        return plan_call(
            engine, request, options, support_for, cut_json=cut_json, cut_calls=cut_calls
        )

    return build


def request_of(
    options: CallOptions,
    *,
    messages: Sequence[ChatMessage | Mapping[str, Any]] | None = None,
    prompt: str | None = None,
) -> ChatRequest | CompletionRequest:
    """The engine request for chat ``messages`` or a raw ``prompt``, with ``options``' sampling,
    limits and template."""
    common: dict[str, Any] = {
        "sampling": options.sampling,
        "max_tokens": options.max_tokens,
        "stop": options.stop,
        "timeout": options.timeout,
        "logprobs": options.logprobs,
    }
    if messages is not None:
        return ChatRequest(messages=messages, chat_template=options.chat_template, **common)
    assert prompt is not None
    return CompletionRequest(prompt=prompt, **common)
