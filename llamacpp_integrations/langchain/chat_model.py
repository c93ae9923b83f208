"""``ChatLlamaCpp``: a LangChain chat model served by the shared local engine."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal, cast

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.model_profile import ModelProfile
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import (
    JsonOutputKeyToolsParser,
    PydanticToolsParser,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr

from ..engine import ChatRequest, Engine, SamplingParams, engine_for
from ..errors import EngineOverloadedError, SchemaNotSupportedError
from ..models import read_gguf_info, resolve_model_path
from ..multimodal import DEFAULT_IMAGE_POLICY, ImagePolicy, image_reader_for
from ..tools import (
    TemplateToolSupport,
    ToolStreamChunk,
    agenerate_with_tools,
    astream_with_tools,
    constrain,
    detect_tool_support,
    generate_with_tools,
    schema_to_gbnf,
    stream_with_tools,
)
from .messages import (
    ImageReader,
    has_image_blocks,
    openai_tool_calls,
    to_engine_messages,
    tool_call_chunks,
    tool_calls_to_langchain,
    usage_metadata,
)

__all__ = ["ChatLlamaCpp"]

# EngineConfig fields a chat model may set; only those the user sets are passed on, so two
# adapters built with the same model and no explicit settings share one registry engine.
_ENGINE_FIELDS = ("mmproj", "n_ctx_per_seq", "n_seq_max", "n_threads", "n_gpu_layers", "n_batch")
_PROVIDER = "llamacpp"
# Sampling defaults are the engine's own, so the adapters cannot drift from them.
_DEFAULTS = SamplingParams()


class ChatLlamaCpp(BaseChatModel):
    """A local GGUF model as a LangChain chat model, on the shared continuous-batching engine.

    Every instance built for the same model (and engine settings) uses the same engine, so
    ``abatch``, concurrent ``astream`` calls and other adapters are decoded together in one
    batch, and the weights are in memory once. The engine loads on first use.

    Example:
        .. code-block:: python

            from llamacpp_integrations.langchain import ChatLlamaCpp

            llm = ChatLlamaCpp(model="smollm2-135m", temperature=0.2, max_tokens=128)
            llm.invoke("Name three rivers.")
            llm.bind_tools([get_weather], tool_choice="any").invoke("Weather in Oslo?")
            llm.with_structured_output(Person).invoke("Ada, 36, London")

    Tool calls and structured answers are constrained by grammars built from their schemas,
    so every returned call names an offered tool and has valid arguments.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, populate_by_name=True)

    model: str | None = None
    """A ``.gguf`` path, a known short name (``smollm2-135m``), ``hf://owner/repo/file.gguf``,
    or ``None`` for the ``LLAMACPP_MODEL`` environment variable."""
    engine: Engine | None = Field(default=None, exclude=True)
    """An engine to serve from instead of the registry's shared one."""
    mmproj: str | None = None
    """The model's multimodal projector (``mmproj`` GGUF path or ``hf://`` file): with it,
    messages may carry images."""
    image_policy: ImagePolicy = DEFAULT_IMAGE_POLICY
    """Which image sources are read: by default in-memory data only (base64, data URIs); allow
    local directories or remote URLs here."""
    temperature: float = _DEFAULTS.temperature
    max_tokens: int | None = None
    """Most tokens to generate; ``None`` lets the answer run to the end of its context."""
    top_p: float = _DEFAULTS.top_p
    top_k: int = _DEFAULTS.top_k
    min_p: float = _DEFAULTS.min_p
    repeat_penalty: float = _DEFAULTS.repeat_penalty
    presence_penalty: float = _DEFAULTS.presence_penalty
    frequency_penalty: float = _DEFAULTS.frequency_penalty
    seed: int | None = None
    stop: list[str] | None = Field(default=None, alias="stop_sequences")
    timeout: float | None = None
    """Seconds a request may take from submission, queueing included."""
    max_retries: int = 2
    """Retries when the engine's queue is full (``EngineOverloadedError``)."""
    api_key: SecretStr | None = Field(default=None, exclude=True)
    """Accepted for interface compatibility; a local model needs none."""
    chat_template: str | None = None
    """A Jinja chat template used instead of the one in the GGUF."""
    parallel_tool_calls: bool = True
    """Allow several tool calls in one answer (``bind_tools`` may override it)."""
    streaming: bool = False
    """Make ``invoke`` stream internally, so callbacks get ``on_llm_new_token`` per delta."""
    logprobs: bool | None = None
    """Return log-probabilities of the generated tokens in ``response_metadata``."""
    top_logprobs: int | None = None
    n_ctx_per_seq: int | None = None
    n_seq_max: int | None = None
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    n_batch: int | None = None

    _engine: Engine | None = PrivateAttr(default=None)
    _engine_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _tool_support: TemplateToolSupport | None = PrivateAttr(default=None)

    # ---- engine ---------------------------------------------------------------------------

    def _settings(self) -> dict[str, Any]:
        return {
            name: getattr(self, name)
            for name in _ENGINE_FIELDS
            if name in self.model_fields_set and getattr(self, name) is not None
        }

    def _get_engine(self, model: str | None = None) -> Engine:
        """The engine serving this model; ``model`` overrides it for one call (the registry
        then serves that model, with the same settings)."""
        if model is not None and model != self.model:
            return engine_for(None, model, self._settings())
        if self._engine is None:
            with self._engine_lock:
                if self._engine is None:
                    self._engine = engine_for(self.engine, self.model, self._settings())
        return self._engine

    async def _aget_engine(self, model: str | None = None) -> Engine:
        """``_get_engine`` for async callers: a first use loads the weights (a second or more)
        on a thread, so the event loop keeps running meanwhile."""
        if self._engine is not None and (model is None or model == self.model):
            return self._engine
        return await asyncio.to_thread(self._get_engine, model)

    def _support(self, engine: Engine, chat_template: str | None) -> TemplateToolSupport:
        if chat_template != self.chat_template or engine is not self._engine:
            return detect_tool_support(engine, chat_template)  # a per-call template or model
        if self._tool_support is None:
            self._tool_support = detect_tool_support(engine, chat_template)
        return self._tool_support

    # ---- LangChain metadata ---------------------------------------------------------------

    @property
    def _llm_type(self) -> str:
        return "llamacpp-chat"

    @property
    def model_name(self) -> str:
        """The model as the user named it; without a name (``LLAMACPP_MODEL``), the GGUF's
        own name or its file name."""
        if self.model:
            return self.model
        engine = self._get_engine()
        return engine.info.name or Path(engine.info.path).stem

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model, **self._sampling_kwargs()}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(
            ls_provider=_PROVIDER,
            ls_model_name=kwargs.get("model") or self.model_name,
            ls_model_type="chat",
            ls_temperature=kwargs.get("temperature", self.temperature),
        )
        max_tokens = kwargs.get("max_tokens", self.max_tokens)
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        if stop or self.stop:
            params["ls_stop"] = stop or self.stop
        return params

    def _resolve_model_profile(self) -> ModelProfile | None:
        # Read from the GGUF header alone (no weights loaded), so building a model stays cheap.
        try:
            info = read_gguf_info(resolve_model_path(self.model))
        except Exception:
            return None
        context = info.context_length or 4096
        if self.n_ctx_per_seq:
            context = min(context, self.n_ctx_per_seq)
        images = self.engine.info.supports_images if self.engine is not None else bool(self.mmproj)
        return ModelProfile(
            name=info.name or Path(str(self.model)).stem,
            max_input_tokens=context,
            max_output_tokens=context,
            text_inputs=True,
            image_inputs=images,
            image_url_inputs=images and self.image_policy.allow_remote,
            pdf_inputs=False,
            audio_inputs=False,
            video_inputs=False,
            text_outputs=True,
            tool_calling=True,
            tool_choice=True,
            tool_call_streaming=True,
            structured_output=True,
            temperature=True,
        )

    # ---- tokens ---------------------------------------------------------------------------

    def get_token_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` with the model's own tokenizer."""
        return self._get_engine().tokenize(text)

    def get_num_tokens(self, text: str) -> int:
        return len(self.get_token_ids(text))

    def get_num_tokens_from_messages(
        self,
        messages: list[BaseMessage],
        tools: Sequence[Any] | None = None,
    ) -> int:
        """Tokens of the prompt these messages (and tools) render to with the chat template."""
        engine = self._get_engine()
        request = ChatRequest(
            messages=to_engine_messages(messages, self._image_reader(engine)),
            chat_template=self.chat_template,
            tools=[convert_to_openai_tool(tool) for tool in tools] if tools else None,
        )
        return engine.count_prompt_tokens(request)

    # ---- requests -------------------------------------------------------------------------

    def _sampling_kwargs(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "repeat_penalty": self.repeat_penalty,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "seed": self.seed,
        }

    def _image_reader(self, engine: Engine) -> ImageReader | None:
        return image_reader_for(engine.info, self.image_policy)

    async def _arequest(
        self,
        engine: Engine,
        messages: list[BaseMessage],
        stop: list[str] | None,
        kwargs: dict[str, Any],
    ) -> tuple[ChatRequest, dict[str, Any]]:
        """``_request`` for async callers: reading images (maybe a fetch) runs on a thread."""
        if has_image_blocks(messages):
            return await asyncio.to_thread(self._request, engine, messages, stop, kwargs)
        return self._request(engine, messages, stop, kwargs)

    def _request(
        self,
        engine: Engine,
        messages: list[BaseMessage],
        stop: list[str] | None,
        kwargs: dict[str, Any],
    ) -> tuple[ChatRequest, dict[str, Any]]:
        """The engine request, and what decides how it is run (tools, response format)."""
        sampling = self._sampling_kwargs()
        for name in sampling:
            if name in kwargs:
                sampling[name] = kwargs.pop(name)
        options: dict[str, Any] = {
            key: kwargs.pop(key)
            for key in ("tools", "tool_choice", "parallel_tool_calls", "response_format")
            if key in kwargs
        }
        max_tokens = kwargs.pop("max_tokens", self.max_tokens)
        timeout = kwargs.pop("timeout", self.timeout)
        chat_template = kwargs.pop("chat_template", self.chat_template)
        logprobs = kwargs.pop("logprobs", self.logprobs)
        top_logprobs = kwargs.pop("top_logprobs", self.top_logprobs)
        if kwargs:
            raise TypeError(f"unexpected arguments for ChatLlamaCpp: {', '.join(sorted(kwargs))}")
        request_kwargs: dict[str, Any] = {}
        if logprobs:
            request_kwargs["logprobs"] = top_logprobs or 0
        request = ChatRequest(
            messages=to_engine_messages(messages, self._image_reader(engine)),
            sampling=SamplingParams(**sampling),
            max_tokens=max_tokens,
            stop=tuple(stop if stop is not None else self.stop or ()),
            timeout=timeout,
            chat_template=chat_template,
            **request_kwargs,
        )
        response_format = options.get("response_format")
        if response_format is not None:
            request = cast(ChatRequest, constrain(request, _response_schema(response_format)))
        return request, options

    def _uses_tools(self, options: Mapping[str, Any]) -> bool:
        return bool(options.get("tools"))

    def _tool_kwargs(
        self, engine: Engine, request: ChatRequest, options: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {
            "tool_choice": options.get("tool_choice", "auto"),
            "parallel_tool_calls": options.get("parallel_tool_calls", self.parallel_tool_calls),
            "support": self._support(engine, request.chat_template),
        }

    def _metadata(
        self, name: str, finish_reason: str | None, timings: Any, logprobs: Any
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "model_name": name,
            "model_provider": _PROVIDER,
            "finish_reason": finish_reason,
        }
        if timings is not None:
            metadata["timings"] = {
                "queued_s": timings.queued_s,
                "time_to_first_token_s": timings.time_to_first_token_s,
                "prompt_eval_s": timings.prompt_eval_s,
                "generation_s": timings.generation_s,
                "total_s": timings.total_s,
            }
        if logprobs is not None:
            metadata["logprobs"] = {"content": [_logprob_entry(entry) for entry in logprobs]}
        return metadata

    def _with_retries(self, call: Callable[[], Any]) -> Any:
        for attempt in range(self.max_retries + 1):
            try:
                return call()
            except EngineOverloadedError:
                if attempt == self.max_retries:
                    raise
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    async def _awith_retries(self, call: Callable[[], Any]) -> Any:
        for attempt in range(self.max_retries + 1):
            try:
                return await call()
            except EngineOverloadedError:
                if attempt == self.max_retries:
                    raise
                await asyncio.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    # ---- invoke ---------------------------------------------------------------------------

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        model = kwargs.pop("model", None)
        engine = self._get_engine(model)
        request, options = self._request(engine, messages, stop, kwargs)
        name = model or self.model_name
        if self._uses_tools(options):
            tools = options["tools"]
            tool_kwargs = self._tool_kwargs(engine, request, options)
            result = self._with_retries(
                lambda: generate_with_tools(engine, request, tools, **tool_kwargs)
            )
            return self._tool_result(result, name)
        completion = self._with_retries(lambda: engine.generate(request))
        return self._plain_result(completion, name)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        model = kwargs.pop("model", None)
        engine = await self._aget_engine(model)
        request, options = await self._arequest(engine, messages, stop, kwargs)
        name = model or self.model_name
        if self._uses_tools(options):
            tools = options["tools"]
            tool_kwargs = self._tool_kwargs(engine, request, options)
            result = await self._awith_retries(
                lambda: agenerate_with_tools(engine, request, tools, **tool_kwargs)
            )
            return self._tool_result(result, name)
        completion = await self._awith_retries(lambda: engine.agenerate(request))
        return self._plain_result(completion, name)

    def _plain_result(self, completion: Any, name: str) -> ChatResult:
        message = AIMessage(
            content=completion.text,
            usage_metadata=usage_metadata(completion.usage),
            response_metadata=self._metadata(
                name,
                completion.finish_reason,
                completion.timings,
                getattr(completion, "logprobs", None),
            ),
            id=completion.request_id,
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _tool_result(self, result: Any, name: str) -> ChatResult:
        completion = result.completion
        additional: dict[str, Any] = {}
        if result.tool_calls:
            additional["tool_calls"] = openai_tool_calls(result.tool_calls)
        message = AIMessage(
            content=result.content,
            tool_calls=tool_calls_to_langchain(result.tool_calls),
            additional_kwargs=additional,
            usage_metadata=usage_metadata(completion.usage),
            response_metadata=self._metadata(
                name,
                result.finish_reason,
                completion.timings,
                getattr(completion, "logprobs", None),
            ),
            id=completion.request_id,
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    # ---- stream ---------------------------------------------------------------------------

    def _chunk(self, piece: ToolStreamChunk, name: str) -> ChatGenerationChunk:
        last = piece.finish_reason is not None
        message = AIMessageChunk(
            content=piece.text,
            tool_call_chunks=tool_call_chunks(piece.tool_call_deltas),
            id=piece.request_id,
            chunk_position="last" if last else None,
        )
        if last:
            assert piece.usage is not None  # the engine's last chunk always carries usage
            message.usage_metadata = usage_metadata(piece.usage)
            message.response_metadata = self._metadata(
                name, piece.finish_reason, piece.timings, None
            )
        if piece.logprobs:
            message.response_metadata.setdefault("logprobs", {"content": []})
            message.response_metadata["logprobs"]["content"] += [
                _logprob_entry(entry) for entry in piece.logprobs
            ]
        return ChatGenerationChunk(message=message)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        model = kwargs.pop("model", None)
        engine = self._get_engine(model)
        request, options = self._request(engine, messages, stop, kwargs)
        name = model or self.model_name
        pieces: Iterator[ToolStreamChunk]
        if self._uses_tools(options):
            pieces = stream_with_tools(
                engine, request, options["tools"], **self._tool_kwargs(engine, request, options)
            )
        else:
            pieces = (ToolStreamChunk.of_text(chunk) for chunk in engine.stream(request))
        for piece in pieces:
            chunk = self._chunk(piece, name)
            if run_manager is not None and piece.text:
                run_manager.on_llm_new_token(piece.text, chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        model = kwargs.pop("model", None)
        engine = await self._aget_engine(model)
        request, options = await self._arequest(engine, messages, stop, kwargs)
        name = model or self.model_name
        if self._uses_tools(options):
            async for piece in astream_with_tools(
                engine, request, options["tools"], **self._tool_kwargs(engine, request, options)
            ):
                chunk = self._chunk(piece, name)
                if run_manager is not None and piece.text:
                    await run_manager.on_llm_new_token(piece.text, chunk=chunk)
                yield chunk
            return
        async for raw in engine.astream(request):
            piece = ToolStreamChunk.of_text(raw)
            chunk = self._chunk(piece, name)
            if run_manager is not None and piece.text:
                await run_manager.on_llm_new_token(piece.text, chunk=chunk)
            yield chunk

    # ---- tools and structured output ------------------------------------------------------

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: dict[str, Any] | str | bool | None = None,
        parallel_tool_calls: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Offer ``tools`` to the model.

        ``tool_choice``: ``"auto"`` (default), ``"none"``, ``"any"`` / ``"required"`` /
        ``True`` (some tool must be called), a tool name, or
        ``{"type": "function", "function": {"name": ...}}``. Calls are constrained by a grammar
        from each tool's schema.
        """
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        if isinstance(tool_choice, str) and tool_choice not in ("auto", "none", "any", "required"):
            tool_choice = {"type": "function", "function": {"name": tool_choice}}
        bound: dict[str, Any] = {"tools": formatted, **kwargs}
        if tool_choice is not None:
            bound["tool_choice"] = tool_choice
        if parallel_tool_calls is not None:
            bound["parallel_tool_calls"] = parallel_tool_calls
        return super().bind(**bound)

    def with_structured_output(
        self,
        schema: dict[str, Any] | type,
        *,
        method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
        include_raw: bool = False,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any] | BaseModel]:
        """Answers parsed into ``schema`` (Pydantic v2 class, TypedDict, or JSON schema).

        ``method``: ``json_schema`` (default) constrains the answer with a grammar from the
        schema; ``function_calling`` forces a call of a tool with that schema; ``json_mode``
        constrains the answer to a JSON object, and to the schema as well whenever the schema
        converts to a grammar (a JSON object that parses is what json_mode is asked for).
        """
        kwargs.pop("strict", None)
        if kwargs:
            raise ValueError(f"unsupported arguments: {', '.join(sorted(kwargs))}")
        is_pydantic = isinstance(schema, type) and is_basemodel_subclass(schema)
        ls_format = {"kwargs": {"method": method}, "schema": schema}
        parser: Runnable[Any, Any]
        if method == "function_calling":
            tool_name = convert_to_openai_tool(schema)["function"]["name"]
            llm = self.bind_tools(
                [schema],
                tool_choice=tool_name,
                parallel_tool_calls=False,
                ls_structured_output_format=ls_format,
            )
            if is_pydantic:
                parser = PydanticToolsParser(tools=[cast(type, schema)], first_tool_only=True)
            else:
                parser = JsonOutputKeyToolsParser(key_name=tool_name, first_tool_only=True)
        elif method in ("json_schema", "json_mode"):
            response_format = _response_format(schema, method)
            llm = self.bind(response_format=response_format, ls_structured_output_format=ls_format)
            if is_pydantic:
                parser = PydanticOutputParser(pydantic_object=cast(type[BaseModel], schema))
            else:
                parser = JsonOutputParser()
        else:
            raise ValueError(
                f"method must be 'json_schema', 'function_calling' or 'json_mode', not {method!r}"
            )
        if not include_raw:
            return llm | parser
        parse_or_none = RunnablePassthrough.assign(
            parsed=itemgetter("raw") | parser, parsing_error=lambda _: None
        ).with_fallbacks(
            [RunnablePassthrough.assign(parsed=lambda _: None)], exception_key="parsing_error"
        )
        return RunnableMap(raw=llm) | parse_or_none


def _response_format(schema: dict[str, Any] | type, method: str) -> dict[str, Any]:
    """``json_schema``: the grammar from the schema. ``json_mode``: a JSON object, held to the
    schema too when it converts to a grammar (still a JSON object, and one that parses)."""
    json_schema = _json_schema_of(schema)
    if method == "json_mode":
        try:
            schema_to_gbnf(json_schema)
        except SchemaNotSupportedError:
            return {"type": "json_object"}
    return {"type": "json_schema", "schema": json_schema}


def _json_schema_of(schema: dict[str, Any] | type) -> dict[str, Any]:
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return cast(type[BaseModel], schema).model_json_schema()
    if isinstance(schema, dict) and schema.get("type") == "function" and "function" in schema:
        return dict(schema["function"].get("parameters") or {"type": "object"})
    if isinstance(schema, dict) and "parameters" in schema and "name" in schema:
        return dict(schema["parameters"])  # an OpenAI function without the wrapper
    if isinstance(schema, dict):
        return schema  # a JSON schema already
    return convert_to_json_schema(schema)


def _response_schema(response_format: Mapping[str, Any]) -> Mapping[str, Any] | None:
    kind = response_format.get("type")
    if kind == "json_object":
        return None
    if kind == "json_schema":
        schema = response_format.get("schema") or response_format.get("json_schema", {})
        return cast(Mapping[str, Any], schema.get("schema", schema))
    raise ValueError(f"response_format type must be 'json_schema' or 'json_object', not {kind!r}")


def _logprob_entry(entry: Any) -> dict[str, Any]:
    return {
        "token": entry.token,
        "logprob": entry.logprob,
        "bytes": list(entry.bytes),
        "top_logprobs": [
            {"token": top.token, "logprob": top.logprob, "bytes": list(top.bytes)}
            for top in entry.top
        ],
    }
