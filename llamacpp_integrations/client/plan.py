"""One plan for every kind of call: plain text, structured output, or tools.

``plan_call`` turns a request and its ``CallOptions`` into a ``CallPlan``: the engine request to
run and how to read its answer, whole (``CallPlan.read``) or streamed (``CallPlan.reader``).
Every executor (``execute.py``) and every adapter reads answers through these, so the three
kinds behave the same whichever way they are run. A reasoning model's call names its template's
reasoning format (``engine.ReasoningSpec``): the engine splits the thinking from the answer,
and grammars constrain the answer after the thinking.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..engine import (
    ChatMessage,
    ChatRequest,
    Completion,
    CompletionRequest,
    ImageInput,
    InferenceEngine,
    ReasoningFormat,
    ReasoningSpec,
)
from ..errors import InvalidRequestError
from ..multimodal import ImagePolicy, media_reader_for
from ..tools import (
    CutCalls,
    TemplateToolSupport,
    ToolCallPlan,
    ToolSpec,
    answer_grammar,
    constrain,
    normalize_tool_choice,
    normalize_tools,
    plan_tool_request,
)
from ..tools.answer_room import forced_answer_budget
from .options import CallOptions
from .results import CallResult, ChunkReader, CutJson, read_answer

__all__ = [
    "CallPlan",
    "CallResult",
    "ChunkReader",
    "TemplateFacts",
    "chat_plan_factory",
    "plan_call",
    "reasoning_spec",
    "request_of",
    "structured_plan",
    "tool_plan",
]

ImageReader = Callable[[Any], ImageInput]
"""Reads an image source (a framework's image block's data, path or URL) into pixels."""


class TemplateFacts(Protocol):
    """What a chat template does with tools and with reasoning, probed (and kept) once per
    template; ``EngineBinding`` is one."""

    def tool_support(
        self, engine: InferenceEngine, chat_template: str | None
    ) -> TemplateToolSupport: ...

    def reasoning_format(
        self, engine: InferenceEngine, chat_template: str | None
    ) -> ReasoningFormat | None: ...


@dataclass(frozen=True)
class CallPlan:
    """The engine request of a call, and how its answer is read."""

    request: ChatRequest | CompletionRequest
    tools: ToolCallPlan | None = None
    structured: bool = False
    cut_json: CutJson = "raise"

    def read(self, completion: Completion) -> CallResult:
        """The whole answer (see ``ChunkReader.read`` for what raises)."""
        return read_answer(
            completion,
            tools=self.tools,
            structured=self.structured,
            cut_json=self.cut_json,
        )

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
    answer_schema: Mapping[str, Any] | None = None,
) -> CallPlan:
    """A call that may (or, per ``tool_choice``, must) call ``tools``, and answers without a
    call in JSON following ``answer_schema`` when one is given; see
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
        answer_schema=answer_schema,
    )
    return CallPlan(planned.request, tools=planned)


def plan_call(
    engine: InferenceEngine,
    request: ChatRequest | CompletionRequest,
    options: CallOptions,
    facts: TemplateFacts,
    *,
    cut_json: CutJson = "raise",
    cut_calls: CutCalls = "raise",
) -> CallPlan:
    """The plan for ``request`` under ``options`` (its tools or response format, and for a
    reasoning model its switch and budget).

    Raises:
        InvalidRequestError: tools on a raw completion, or bad tools.
        SchemaNotSupportedError: a schema no grammar here can express.
    """
    if isinstance(request, ChatRequest):
        format = facts.reasoning_format(engine, request.chat_template)
        spec = reasoning_spec(format, options)
        if spec is not None and spec.budget is None and spec.expected:
            spec = _room_for_forced_answer(spec, options, request.max_tokens)
        request = replace(request, reasoning=spec)
    if options.tools is not None:
        if not isinstance(request, ChatRequest):
            raise InvalidRequestError("tools need a chat request")
        return tool_plan(
            engine,
            request,
            options.tools,
            tool_choice=options.tool_choice,
            parallel_tool_calls=options.parallel_tool_calls,
            support=facts.tool_support(engine, request.chat_template),
            allow_repeated_calls=options.allow_repeated_calls,
            cut_calls=cut_calls,
            answer_schema=_answer_schema(options),
        )
    if options.response_format is not None:
        return structured_plan(request, options.response_format.schema, cut_json=cut_json)
    if request.grammar is not None and request.reasoning is not None:
        # A reasoning model thinks freely first; the caller's grammar shapes the answer.
        rooted = _root_first(request.grammar)
        request = replace(request, grammar=answer_grammar(request.reasoning, rooted))
    return CallPlan(request)


# A quoted literal, a character class, or the rule name ``root`` as a whole word.
_ROOT_OR_LITERAL = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|(?<![\w-])root(?![\w-])')


def _root_first(grammar: str) -> str:
    """A caller's GBNF with a one-line root rule first, as ``answer_grammar`` takes it: the
    caller's ``root`` (wherever it is, however long) is renamed and called from a new root."""
    renamed = _ROOT_OR_LITERAL.sub(
        lambda m: "caller-root" if m.group(0) == "root" else m.group(0), grammar
    )
    return f"root ::= caller-root\n{renamed}"


def _answer_schema(options: CallOptions) -> Mapping[str, Any] | None:
    """The schema an answer without calls follows, when a response format comes with tools
    (LangChain's ``create_agent(response_format=...)`` sends both)."""
    form = options.response_format
    if form is None:
        return None
    return form.schema if form.schema is not None else {"type": "object"}


def reasoning_spec(format: ReasoningFormat | None, options: CallOptions) -> ReasoningSpec | None:
    """What a call asks of a reasoning model (``None`` for a template without reasoning:
    ``reasoning`` and ``reasoning_budget`` do nothing there). The template's switch among the
    call's ``template_kwargs`` counts when ``reasoning`` is not set."""
    if format is None:
        return None
    enabled = options.reasoning
    switched = options.template_kwargs.get(format.switch) if format.switch else None
    if enabled is None and isinstance(switched, bool):
        # The caller set the template's own switch as a variable: the output is read the way
        # that prompt makes it (a reasoning request would set the same variable).
        enabled = switched
    return ReasoningSpec(format, enabled=enabled, budget=options.reasoning_budget)


def _room_for_forced_answer(
    spec: ReasoningSpec, options: CallOptions, max_tokens: int | None
) -> ReasoningSpec:
    """``spec`` with a thinking budget that leaves room within ``max_tokens`` for an answer the
    caller forces (a required call, a structured answer); unchanged when nothing is forced.
    A caller's own ``reasoning_budget`` is never replaced (the caller checks ``budget``)."""
    schemas: list[Mapping[str, Any] | None]
    if options.tools is not None:
        tools = normalize_tools(options.tools)
        choice = normalize_tool_choice(options.tool_choice, tools)
        if not choice.must_call:
            return spec
        schemas = [t.parameters for t in tools if choice.name in (None, t.name)]
    elif options.response_format is not None:
        schemas = [options.response_format.schema]
    else:
        return spec
    return replace(spec, budget=forced_answer_budget(schemas, max_tokens))


def chat_plan_factory(
    engine: InferenceEngine,
    options: CallOptions,
    messages_of: Callable[[ImageReader | None], Sequence[ChatMessage | Mapping[str, Any]]],
    *,
    image_policy: ImagePolicy,
    facts: TemplateFacts,
    cut_json: CutJson = "raise",
    cut_calls: CutCalls = "raise",
) -> Callable[[], CallPlan]:
    """What builds a chat call's plan: ``messages_of`` translates the framework's messages,
    reading their images (and, through ``multimodal.read_audio``, their clips) with the reader
    ``image_policy`` allows. Async executors run it on a
    thread, since reading images (maybe fetching them) and planning are slow."""

    def build() -> CallPlan:
        messages = messages_of(media_reader_for(engine.info, image_policy))
        request = request_of(options, messages=messages)
        return plan_call(engine, request, options, facts, cut_json=cut_json, cut_calls=cut_calls)

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
        "grammar": options.grammar,
        "lora": options.lora,
    }
    if messages is not None:
        return ChatRequest(
            messages=messages,
            chat_template=options.chat_template,
            template_kwargs=options.template_kwargs,
            **common,
        )
    assert prompt is not None
    return CompletionRequest(prompt=prompt, **common)
