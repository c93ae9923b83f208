"""``LlamaCpp``: a LlamaIndex function-calling LLM served by the shared in-process engine."""

from __future__ import annotations

import asyncio
import json
from collections.abc import (
    AsyncGenerator,
    Callable,
    Generator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import llama_index.core.instrumentation as instrument
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr
from llama_index.core.constants import DEFAULT_NUM_OUTPUTS
from llama_index.core.instrumentation.events.llm import (
    LLMStructuredPredictEndEvent,
    LLMStructuredPredictInProgressEvent,
    LLMStructuredPredictStartEvent,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.prompts.base import BasePromptTemplate
from llama_index.core.types import Model

from ..engine import (
    ChatRequest,
    Completion,
    CompletionRequest,
    Engine,
    SamplingParams,
    StreamChunk,
    engine_for,
)
from ..errors import InvalidRequestError
from ..multimodal import DEFAULT_IMAGE_POLICY, ImagePolicy, image_reader_for
from ..tools import (
    TemplateToolSupport,
    agenerate_structured,
    agenerate_with_tools,
    astream_with_tools,
    constrain,
    detect_tool_support,
    generate_structured,
    generate_with_tools,
    stream_with_tools,
)
from .messages import (
    ImageReader,
    PartialToolCall,
    assistant_message,
    completion_raw,
    has_image_blocks,
    response_raw,
    to_engine_messages,
    to_logprobs,
    tool_selections,
    tools_to_openai,
    usage_kwargs,
)
from .streaming import ChatStream, PartialObjects, aclosed, closed

if TYPE_CHECKING:
    from llama_index.core.program.utils import FlexibleModel
    from llama_index.core.tools.types import BaseTool

__all__ = ["LlamaCpp"]

dispatcher = instrument.get_dispatcher(__name__)  # type: ignore[attr-defined]  # re-exported

_F = TypeVar("_F", bound=Callable[..., Any])

_SAMPLING_FIELDS = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
)
_REQUEST_FIELDS = ("max_tokens", "stop", "timeout", "logprobs", "top_logprobs")
_TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls")
_ENGINE_FIELDS = ("mmproj", "n_ctx_per_seq", "n_seq_max", "n_threads", "n_gpu_layers")


def _chat_callback(fn: _F) -> _F:
    # LlamaIndex's decorators are untyped; they fire callbacks and instrumentation events.
    return cast(_F, llm_chat_callback()(fn))


def _completion_callback(fn: _F) -> _F:
    return cast(_F, llm_completion_callback()(fn))


@dataclass(frozen=True)
class _Options:
    """One call's settings: the instance's fields with the call's keyword arguments on top."""

    sampling: SamplingParams
    max_tokens: int | None
    stop: tuple[str, ...]
    timeout: float | None
    logprobs: int | None
    tools: list[dict[str, Any]] | None
    tool_choice: object
    parallel_tool_calls: bool
    schema: Mapping[str, Any] | None
    structured: bool


def _schema_of(response_format: object) -> Mapping[str, Any] | None:
    """The JSON schema of a ``response_format`` (``None``: any JSON object)."""
    if isinstance(response_format, type) and issubclass(response_format, BaseModel):
        return response_format.model_json_schema()
    if isinstance(response_format, Mapping):
        kind = response_format.get("type")
        if kind == "json_object":
            schema = response_format.get("schema")
            return schema if isinstance(schema, Mapping) else None
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, Mapping) else None
            if isinstance(schema, Mapping):
                return schema
    raise InvalidRequestError(
        "response_format must be a pydantic model class, {'type': 'json_object'} or "
        "{'type': 'json_schema', 'json_schema': {'schema': {...}}}"
    )


# Sampling defaults are the engine's own, so the adapters cannot drift from them.
_DEFAULTS = SamplingParams()


class LlamaCpp(FunctionCallingLLM):
    """A local GGUF model as a LlamaIndex function-calling LLM.

    Generation runs on this package's shared engine: every ``LlamaCpp``, ``LlamaCppEmbedding``
    (and LangChain class) built with the same ``model`` and engine settings serves from one
    engine, so from one copy of the weights, with continuous batching across all of them. The
    engine is created on first use (or pass ``engine=`` to use one you made).

    Example::

        llm = LlamaCpp(model="smollm2-135m", temperature=0.2, max_tokens=128)
        print(llm.complete("Name a colour.").text)
        response = llm.chat_with_tools([weather_tool], user_msg="Weather in Paris?")
        calls = llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)

    Every method has an async twin that awaits the engine directly (it never blocks the event
    loop; only the very first call, when the model is loaded, loads it on a worker thread).
    Tool calling and structured output are constrained by grammars built from the JSON schemas,
    so every returned call names an offered tool with valid arguments and every structured
    answer validates, whatever the model.

    ``metadata.context_window`` is the engine's per-sequence context (``n_ctx_per_seq``): each
    request runs in one sequence of the batch, so that is what one prompt plus its answer fits.

    Keyword arguments of ``chat`` / ``complete`` (and of ``llm_kwargs``) override the fields of
    the same names for one call: the sampling fields, ``max_tokens``, ``stop``, ``timeout``,
    ``logprobs``, ``top_logprobs``. ``chat`` also takes ``tools`` (OpenAI-style dicts or
    LlamaIndex tools), ``tool_choice`` (``"auto"``, ``"none"``, ``"required"`` or a tool name),
    ``parallel_tool_calls`` and ``response_format`` (a pydantic class, ``{"type":
    "json_object"}`` or an OpenAI ``json_schema`` format). Unknown keyword arguments raise
    ``InvalidRequestError``.

    Responses: ``raw`` holds the engine's report (``id``, ``model``, ``finish_reason``,
    ``usage`` with ``cached_prompt_tokens``, ``timings``); ``additional_kwargs`` the token
    counts as llama-index-llms-openai reports them; tool calls are ``ToolCallBlock`` s of the
    message and, OpenAI-shaped, its ``additional_kwargs["tool_calls"]``. Streamed responses are
    cumulative (``message`` so far, ``delta`` new); the last one carries usage and timings.
    """

    model: str | None = Field(
        default=None,
        description="A .gguf path, a known short name (e.g. 'smollm2-135m'), "
        "'hf://owner/repo/file.gguf', or None for the LLAMACPP_MODEL environment variable.",
    )
    temperature: float = Field(
        default=_DEFAULTS.temperature, ge=0.0, description="Sampling temperature (0: greedy)."
    )
    top_p: float = Field(
        default=_DEFAULTS.top_p, gt=0.0, le=1.0, description="Nucleus sampling mass."
    )
    top_k: int = Field(default=_DEFAULTS.top_k, ge=0, description="Top-k sampling (0 disables it).")
    min_p: float = Field(default=_DEFAULTS.min_p, ge=0.0, le=1.0, description="Min-p sampling.")
    repeat_penalty: float = Field(
        default=_DEFAULTS.repeat_penalty, gt=0.0, description="Repetition penalty."
    )
    presence_penalty: float = Field(
        default=_DEFAULTS.presence_penalty, description="Presence penalty."
    )
    frequency_penalty: float = Field(
        default=_DEFAULTS.frequency_penalty, description="Frequency penalty."
    )
    seed: int | None = Field(default=None, description="Sampling seed (None: random).")
    max_tokens: int | None = Field(
        default=DEFAULT_NUM_OUTPUTS,
        ge=1,
        description="Most tokens generated per call (None: until the model stops or the "
        "sequence's context is full). Reported as metadata.num_output.",
    )
    stop: list[str] | None = Field(default=None, description="Strings that end generation.")
    logprobs: bool = Field(
        default=False,
        description="Return per-token log-probabilities in the responses' logprobs (each token "
        "first, then the top_logprobs most likely tokens at its step).",
    )
    top_logprobs: int = Field(
        default=0, ge=0, le=20, description="Most likely tokens reported per step with logprobs."
    )
    timeout: float | None = Field(
        default=None, gt=0.0, description="Seconds a request may take before it fails."
    )
    chat_template: str | None = Field(
        default=None, description="A Jinja chat template replacing the GGUF's own."
    )
    mmproj: str | None = Field(
        default=None,
        description="Engine setting: the model's multimodal projector (mmproj GGUF path or "
        "hf:// file); with it, messages may carry ImageBlocks.",
    )
    image_policy: ImagePolicy = Field(
        default=DEFAULT_IMAGE_POLICY,
        description="Which image sources are read: by default in-memory data only; allow "
        "local directories or remote URLs here.",
    )
    n_ctx_per_seq: int | None = Field(
        default=None, description="Engine setting: context of one sequence (None: default)."
    )
    n_seq_max: int | None = Field(
        default=None, description="Engine setting: sequences decoded together (None: default)."
    )
    n_threads: int | None = Field(
        default=None, description="Engine setting: CPU threads (None: default)."
    )
    n_gpu_layers: int | None = Field(
        default=None, description="Engine setting: layers offloaded to a GPU (None: default)."
    )
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Other EngineConfig settings. Adapters with the same model and the same "
        "settings share one engine.",
    )
    raw_completion: bool = Field(
        default=False,
        description="complete() sends the prompt as raw text (no chat template) when True; "
        "by default it is one user message of a chat.",
    )

    _engine: Engine | None = PrivateAttr(default=None)
    _tool_support: TemplateToolSupport | None = PrivateAttr(default=None)

    def __init__(self, *, engine: Engine | None = None, **data: Any) -> None:
        """Build the LLM; ``engine`` serves it instead of the shared engine for ``model``."""
        super().__init__(**data)
        self._engine = engine

    @classmethod
    def class_name(cls) -> str:
        return "llamacpp_integrations_llm"

    # ---- the engine -----------------------------------------------------------------------

    def _engine_settings(self) -> dict[str, Any]:
        settings = {name: getattr(self, name) for name in _ENGINE_FIELDS}
        return {k: v for k, v in settings.items() if v is not None} | dict(self.engine_kwargs)

    @property
    def engine(self) -> Engine:
        """The engine serving this LLM (loading the model on first use)."""
        if self._engine is None:
            self._engine = engine_for(None, self.model, self._engine_settings())
        return self._engine

    async def _aengine(self) -> Engine:
        if self._engine is None:  # loading takes seconds: keep it off the event loop
            engine = await asyncio.to_thread(engine_for, None, self.model, self._engine_settings())
            if self._engine is None:
                self._engine = engine
        return self._engine

    def _support(self, engine: Engine) -> TemplateToolSupport:
        if self._tool_support is None:
            self._tool_support = detect_tool_support(engine, self.chat_template)
        return self._tool_support

    @property
    def metadata(self) -> LLMMetadata:
        """Context window (the engine's per-sequence context), output budget and model name."""
        engine = self.engine
        return LLMMetadata(
            context_window=engine.n_ctx_per_seq,
            num_output=self.max_tokens or DEFAULT_NUM_OUTPUTS,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name=self._model_name(engine),
        )

    @staticmethod
    def _model_name(engine: Engine) -> str:
        return engine.info.name or Path(engine.info.path).name

    # ---- requests -------------------------------------------------------------------------

    def _options(self, kwargs: Mapping[str, Any], *, chat: bool) -> _Options:
        allowed = {*_SAMPLING_FIELDS, *_REQUEST_FIELDS}
        if chat:
            allowed |= {*_TOOL_FIELDS, "response_format"}
        unknown = sorted(set(kwargs) - allowed)
        if unknown:
            raise InvalidRequestError(
                f"unknown keyword arguments {', '.join(unknown)}; accepted: "
                f"{', '.join(sorted(allowed))}"
            )

        def pick(name: str) -> Any:
            return kwargs[name] if name in kwargs else getattr(self, name)

        sampling = SamplingParams(**{name: pick(name) for name in _SAMPLING_FIELDS})
        stop = pick("stop") or ()
        if isinstance(stop, str):
            stop = (stop,)
        tools = [
            tools_to_openai([tool])[0] if hasattr(tool, "metadata") else tool
            for tool in kwargs.get("tools") or ()
        ]
        structured = "response_format" in kwargs and kwargs["response_format"] is not None
        if tools and structured:
            raise InvalidRequestError("tools and response_format cannot be used together")
        return _Options(
            sampling=sampling,
            max_tokens=pick("max_tokens"),
            stop=tuple(stop),
            timeout=pick("timeout"),
            logprobs=(pick("top_logprobs") or 0) if pick("logprobs") else None,
            tools=list(tools) if tools else None,
            tool_choice=kwargs.get("tool_choice", "auto"),
            parallel_tool_calls=bool(kwargs.get("parallel_tool_calls", True)),
            schema=_schema_of(kwargs["response_format"]) if structured else None,
            structured=structured,
        )

    def _image_reader(self, engine: Engine) -> ImageReader | None:
        return image_reader_for(engine.info, self.image_policy)

    async def _achat_request(
        self, engine: Engine, messages: Sequence[ChatMessage], options: _Options
    ) -> ChatRequest:
        """``_chat_request`` for async callers: reading images (maybe a fetch) on a thread."""
        read_image = self._image_reader(engine)
        if has_image_blocks(messages):
            return await asyncio.to_thread(self._chat_request, messages, options, read_image)
        return self._chat_request(messages, options, read_image)

    def _chat_request(
        self,
        messages: Sequence[ChatMessage],
        options: _Options,
        read_image: ImageReader | None = None,
    ) -> ChatRequest:
        return ChatRequest(
            messages=to_engine_messages(messages, read_image),
            sampling=options.sampling,
            max_tokens=options.max_tokens,
            stop=options.stop,
            timeout=options.timeout,
            logprobs=options.logprobs,
            chat_template=self.chat_template,
        )

    def _completion_request(
        self, prompt: str, formatted: bool, options: _Options
    ) -> ChatRequest | CompletionRequest:
        if not self.raw_completion:
            return self._chat_request([ChatMessage(role=MessageRole.USER, content=prompt)], options)
        if not formatted and self.completion_to_prompt is not None:
            prompt = self.completion_to_prompt(prompt)
        return CompletionRequest(
            prompt=prompt,
            sampling=options.sampling,
            max_tokens=options.max_tokens,
            stop=options.stop,
            timeout=options.timeout,
            logprobs=options.logprobs,
        )

    # ---- responses ------------------------------------------------------------------------

    def _chat_response(self, completion: Completion, engine: Engine) -> ChatResponse:
        return ChatResponse(
            message=assistant_message(completion.text),
            raw=completion_raw(completion, self._model_name(engine)),
            additional_kwargs=usage_kwargs(completion.usage),
            logprobs=to_logprobs(completion.logprobs),
        )

    def _completion_response(self, completion: Completion, engine: Engine) -> CompletionResponse:
        return CompletionResponse(
            text=completion.text,
            raw=completion_raw(completion, self._model_name(engine)),
            additional_kwargs=usage_kwargs(completion.usage),
            logprobs=to_logprobs(completion.logprobs),
        )

    def _tool_kwargs(self, engine: Engine, options: _Options) -> dict[str, Any]:
        return {
            "tool_choice": options.tool_choice,
            "parallel_tool_calls": options.parallel_tool_calls,
            "support": self._support(engine),
        }

    # ---- chat -----------------------------------------------------------------------------

    @_chat_callback
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """One answer to ``messages``; with ``tools``, it may call them (see the class doc)."""
        options = self._options(kwargs, chat=True)
        engine = self.engine
        request = self._chat_request(messages, options, self._image_reader(engine))
        model = self._model_name(engine)
        if options.tools:
            result = generate_with_tools(
                engine, request, options.tools, **self._tool_kwargs(engine, options)
            )
            return ChatResponse(
                message=assistant_message(result.content, result.tool_calls),
                raw=completion_raw(result.completion, model, result.finish_reason),
                additional_kwargs=usage_kwargs(result.completion.usage),
                logprobs=to_logprobs(result.completion.logprobs),
            )
        if options.structured:
            completion = generate_structured(engine, request, options.schema).completion
        else:
            completion = engine.generate(request)
        return self._chat_response(completion, engine)

    @_chat_callback
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Async :meth:`chat`."""
        options = self._options(kwargs, chat=True)
        engine = await self._aengine()
        request = await self._achat_request(engine, messages, options)
        model = self._model_name(engine)
        if options.tools:
            result = await agenerate_with_tools(
                engine, request, options.tools, **self._tool_kwargs(engine, options)
            )
            return ChatResponse(
                message=assistant_message(result.content, result.tool_calls),
                raw=completion_raw(result.completion, model, result.finish_reason),
                additional_kwargs=usage_kwargs(result.completion.usage),
                logprobs=to_logprobs(result.completion.logprobs),
            )
        if options.structured:
            completion = (await agenerate_structured(engine, request, options.schema)).completion
        else:
            completion = await engine.agenerate(request)
        return self._chat_response(completion, engine)

    @_chat_callback
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """Cumulative responses: ``message`` holds the text (and tool calls) so far, ``delta``
        the new text; the last one has the usage in ``raw`` and ``additional_kwargs``."""
        options = self._options(kwargs, chat=True)
        engine = self.engine
        request = self._chat_request(messages, options, self._image_reader(engine))
        stream = ChatStream(self._model_name(engine))

        def gen() -> ChatResponseGen:
            if options.tools:
                tool_chunks = stream_with_tools(
                    engine, request, options.tools, **self._tool_kwargs(engine, options)
                )
                with closed(tool_chunks):
                    for tool_chunk in tool_chunks:
                        if (response := stream.tools(tool_chunk)) is not None:
                            yield response
                return
            planned = constrain(request, options.schema) if options.structured else request
            chunks = engine.stream(planned)
            with closed(chunks):
                for chunk in chunks:
                    if (response := stream.text(chunk)) is not None:
                        yield response
            if options.structured:
                stream.check_structured(request.request_id)

        return gen()

    @_chat_callback
    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        """Async :meth:`stream_chat`."""
        options = self._options(kwargs, chat=True)
        engine = await self._aengine()
        request = await self._achat_request(engine, messages, options)
        stream = ChatStream(self._model_name(engine))

        async def gen() -> ChatResponseAsyncGen:
            if options.tools:
                tool_chunks = astream_with_tools(
                    engine, request, options.tools, **self._tool_kwargs(engine, options)
                )
                async with aclosed(tool_chunks):
                    async for tool_chunk in tool_chunks:
                        if (response := stream.tools(tool_chunk)) is not None:
                            yield response
                return
            planned = constrain(request, options.schema) if options.structured else request
            chunks = engine.astream(planned)
            async with aclosed(chunks):
                async for chunk in chunks:
                    if (response := stream.text(chunk)) is not None:
                        yield response
            if options.structured:
                stream.check_structured(request.request_id)

        return gen()

    # ---- completion -----------------------------------------------------------------------

    @_completion_callback
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Complete ``prompt``: as one user message of a chat, or as raw text when
        ``raw_completion`` is set (then ``completion_to_prompt`` applies unless
        ``formatted``)."""
        options = self._options(kwargs, chat=False)
        request = self._completion_request(prompt, formatted, options)
        engine = self.engine
        return self._completion_response(engine.generate(request), engine)

    @_completion_callback
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        """Async :meth:`complete`."""
        options = self._options(kwargs, chat=False)
        request = self._completion_request(prompt, formatted, options)
        engine = await self._aengine()
        return self._completion_response(await engine.agenerate(request), engine)

    def _completion_chunks(
        self, chunk: StreamChunk, text: str, model: str
    ) -> CompletionResponse | None:
        if not chunk.text and not chunk.logprobs and chunk.finish_reason is None:
            return None
        return CompletionResponse(
            text=text,
            delta=chunk.text,
            raw=response_raw(
                chunk.request_id, model, chunk.finish_reason, chunk.usage, chunk.timings
            ),
            additional_kwargs=usage_kwargs(chunk.usage),
            logprobs=to_logprobs(chunk.logprobs),
        )

    @_completion_callback
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        """Cumulative completion responses (``text`` so far, ``delta`` new)."""
        options = self._options(kwargs, chat=False)
        request = self._completion_request(prompt, formatted, options)
        engine = self.engine
        model = self._model_name(engine)

        def gen() -> CompletionResponseGen:
            text = ""
            chunks = engine.stream(request)
            with closed(chunks):
                for chunk in chunks:
                    text += chunk.text
                    if (response := self._completion_chunks(chunk, text, model)) is not None:
                        yield response

        return gen()

    @_completion_callback
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        """Async :meth:`stream_complete`."""
        options = self._options(kwargs, chat=False)
        request = self._completion_request(prompt, formatted, options)
        engine = await self._aengine()
        model = self._model_name(engine)

        async def gen() -> CompletionResponseAsyncGen:
            text = ""
            chunks = engine.astream(request)
            async with aclosed(chunks):
                async for chunk in chunks:
                    text += chunk.text
                    if (response := self._completion_chunks(chunk, text, model)) is not None:
                        yield response

        return gen()

    # ---- tool calling ---------------------------------------------------------------------

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        tool_choice: object = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The ``chat`` arguments for a turn with ``tools``.

        ``tool_choice`` (``"auto"``, ``"none"``, ``"required"``, a tool name or an OpenAI
        ``{"type": "function", "function": {"name": ...}}``) wins over ``tool_required``, which
        turns the default ``"auto"`` into ``"required"``.
        """
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            messages.append(ChatMessage(role=MessageRole.USER, content=user_msg))
        elif user_msg is not None:
            messages.append(user_msg)
        if tool_choice is None or tool_choice == "auto":
            tool_choice = "required" if tool_required else "auto"
        prepared: dict[str, Any] = {"messages": messages, **kwargs}
        if tools:
            prepared["tools"] = tools_to_openai(tools)
            prepared["tool_choice"] = tool_choice
            prepared["parallel_tool_calls"] = allow_parallel_tool_calls
        return prepared

    def _validate_chat_with_tools_response(
        self,
        response: ChatResponse,
        tools: Sequence[BaseTool],
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        """Keep only the first call unless parallel calls were allowed (the grammar already
        allows one call then; this also covers a caller-supplied ``parallel_tool_calls``)."""
        if allow_parallel_tool_calls:
            return response
        calls = tool_selections(response.message)
        if len(calls) <= 1:
            return response
        first = calls[0]
        call = PartialToolCall(first.tool_id, first.tool_name, json.dumps(first.tool_kwargs))
        message = assistant_message(response.message.content or "", [call])
        return response.model_copy(update={"message": message})

    def get_tool_calls_from_response(
        self,
        response: ChatResponse,
        error_on_no_tool_call: bool = True,
        **kwargs: Any,
    ) -> list[ToolSelection]:
        """The calls in a (possibly streamed, partial) response as ``ToolSelection`` s.

        Raises:
            ValueError: there is no call and ``error_on_no_tool_call`` is set (LlamaIndex's
                contract for this method).
        """
        selections = tool_selections(response.message)
        if not selections and error_on_no_tool_call:
            raise ValueError(
                f"expected at least one tool call, got none (reply: {response.message.content!r})"
            )
        return selections

    # ---- structured output ----------------------------------------------------------------

    def structured_predict(
        self,
        output_cls: type[Model],
        prompt: BasePromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model:
        """An ``output_cls`` instance generated under a grammar built from its JSON schema (no
        tool-call round trip, no free-text parsing).

        Raises:
            OutputTruncatedError: ``max_tokens`` ran out inside the JSON answer.
            SchemaNotSupportedError: the schema has a part no grammar here can express.
        """
        dispatcher.event(
            LLMStructuredPredictStartEvent(
                output_cls=output_cls, template=prompt, template_args=prompt_args
            )
        )
        messages = self._get_messages(prompt, **prompt_args)
        response = self.chat(messages, response_format=output_cls, **(llm_kwargs or {}))
        output = output_cls.model_validate_json(response.message.content or "")
        dispatcher.event(LLMStructuredPredictEndEvent(output=output))
        return output

    async def astructured_predict(
        self,
        output_cls: type[Model],
        prompt: BasePromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model:
        """Async :meth:`structured_predict`."""
        dispatcher.event(
            LLMStructuredPredictStartEvent(
                output_cls=output_cls, template=prompt, template_args=prompt_args
            )
        )
        messages = self._get_messages(prompt, **prompt_args)
        response = await self.achat(messages, response_format=output_cls, **(llm_kwargs or {}))
        output = output_cls.model_validate_json(response.message.content or "")
        dispatcher.event(LLMStructuredPredictEndEvent(output=output))
        return output

    def stream_structured_predict(
        self,
        output_cls: type[Model],
        prompt: BasePromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Generator[Model | FlexibleModel, None, None]:
        """Partial objects as the constrained JSON streams: ``output_cls`` instances once what
        came validates, ``FlexibleModel`` s with the fields so far before; the last one is the
        complete ``output_cls`` instance."""
        dispatcher.event(
            LLMStructuredPredictStartEvent(
                output_cls=output_cls, template=prompt, template_args=prompt_args
            )
        )
        messages = self._get_messages(prompt, **prompt_args)
        partial = PartialObjects(output_cls)
        text = ""
        for response in self.stream_chat(
            messages, response_format=output_cls, **(llm_kwargs or {})
        ):
            text = response.message.content or ""
            if (obj := partial.update(text)) is not None:
                dispatcher.event(LLMStructuredPredictInProgressEvent(output=obj))
                yield cast("Model | FlexibleModel", obj)
        output = output_cls.model_validate_json(text)
        if partial.latest != output:
            yield output
        dispatcher.event(LLMStructuredPredictEndEvent(output=output))

    async def astream_structured_predict(
        self,
        output_cls: type[Model],
        prompt: BasePromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> AsyncGenerator[Model | FlexibleModel, None]:
        """Async :meth:`stream_structured_predict`."""
        messages = self._get_messages(prompt, **prompt_args)

        async def gen() -> AsyncGenerator[Model | FlexibleModel, None]:
            dispatcher.event(
                LLMStructuredPredictStartEvent(
                    output_cls=output_cls, template=prompt, template_args=prompt_args
                )
            )
            partial = PartialObjects(output_cls)
            text = ""
            responses = await self.astream_chat(
                messages, response_format=output_cls, **(llm_kwargs or {})
            )
            async for response in responses:
                text = response.message.content or ""
                if (obj := partial.update(text)) is not None:
                    dispatcher.event(LLMStructuredPredictInProgressEvent(output=obj))
                    yield cast("Model | FlexibleModel", obj)
            output = output_cls.model_validate_json(text)
            if partial.latest != output:
                yield output
            dispatcher.event(LLMStructuredPredictEndEvent(output=output))

        return gen()
