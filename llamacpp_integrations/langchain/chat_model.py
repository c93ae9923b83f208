"""``ChatLlamaCpp``: a LangChain chat model served by the shared local engine.

Translation only: fields, LangChain messages in, ``AIMessage`` / ``AIMessageChunk`` out. Binding
the engine, merging call options, planning tool and structured calls and running them live in
``llamacpp_integrations.client``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from functools import partial
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.model_profile import ModelProfile
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ..client import (
    UNSET,
    CallResult,
    CallSettings,
    CallSite,
    EngineSettings,
    MessagesOf,
    PreparedCall,
    SamplingSettings,
    model_display_name,
    openai_logprobs,
    or_default,
)
from ..client.counting import TokenCounter, on_event_loop
from ..client.settings import SAMPLING_SETTINGS
from ..engine import ChatRequest, InferenceEngine, Timings, Usage
from ..errors import ImageInputNotSupportedError, ModelLoadError
from ..models import resolve_model_path
from ..models.resolve import model_spec
from ..multimodal import media_reader_for
from ..tools import ToolStreamChunk
from .messages import (
    PROVIDER,
    ImageReader,
    invalid_tool_calls,
    openai_tool_calls,
    response_metadata,
    to_engine_messages,
    tool_call_chunks,
    tool_calls_to_langchain,
    usage_metadata,
)
from .profile import PlacementFacts, model_profile, placement_facts
from .structured_output import structured_output

__all__ = ["ChatLlamaCpp"]

logger = logging.getLogger(__name__)

_ADVICE = (
    "count once before the loop starts (llm.get_num_tokens('')), or off it "
    "(asyncio.to_thread), to read it beforehand"
)


def _unloaded_name() -> str:
    """The name of ``$LLAMACPP_MODEL``'s model before it is loaded: its file's, found without
    downloading; an ``hf://`` model not fetched yet is named by its spec."""
    try:
        return model_display_name(resolve_model_path(None, download=False))
    except ModelLoadError:
        spec = model_spec(None)
        if spec is not None and spec.strip().startswith("hf://"):
            return spec.strip()
        raise


def _message_fields(name: str, answer: CallResult | ToolStreamChunk) -> dict[str, Any]:
    """The fields a whole answer's ``AIMessage`` and a stream's ``AIMessageChunk`` share, built
    one way so that a stream adds up to the whole answer: text, id and reasoning; on the message
    that ends the answer (it has a finish reason), usage and response metadata; and the
    log-probabilities, when asked for (a chunk's own, which may be none)."""
    usage: Usage | None
    timings: Timings | None
    if isinstance(answer, CallResult):  # its numbers are on its completion
        done = answer.completion
        text, usage, timings, logprobs = answer.content, done.usage, done.timings, done.logprobs
        request_id = done.request_id
    else:  # only a stream's last chunk has usage and timings
        text, usage, timings = answer.text, answer.usage, answer.timings
        logprobs, request_id = answer.logprobs or None, answer.request_id
    reasoning = {"reasoning_content": answer.reasoning} if answer.reasoning else {}
    fields: dict[str, Any] = {"content": text, "id": request_id, "additional_kwargs": reasoning}
    metadata: dict[str, Any] = {}
    if answer.finish_reason is not None:
        assert usage is not None  # the engine's last chunk, like a completion, carries usage
        fields["usage_metadata"] = usage_metadata(usage)
        metadata = response_metadata(name, answer.finish_reason, timings, logprobs)
        if answer.repeats_prevented:
            metadata["repeated_calls_prevented"] = answer.repeats_prevented
    elif logprobs is not None:
        metadata["logprobs"] = {"content": openai_logprobs(logprobs)}
    fields["response_metadata"] = metadata
    return fields


class ChatLlamaCpp(BaseChatModel, SamplingSettings, CallSettings, EngineSettings):
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

    Fields: the sampling settings (``temperature``, ``top_p``...), the per-request settings
    (``timeout``, ``logprobs``, ``top_logprobs``, ``chat_template``), ``image_policy``, and
    every ``EngineConfig`` setting (``n_ctx_per_seq``, ``mmproj``, ``n_gpu_layers``...;
    ``None`` keeps the engine's default). Calls take the sampling and per-request settings,
    ``max_tokens``, ``stop`` and ``model`` as keywords; unknown keywords raise
    ``UnknownOptionError`` (a ``TypeError``), unknown constructor arguments a ``ValidationError``.
    A keyword left out keeps the field's value; ``None`` means "none": ``invoke(...,
    max_tokens=None)`` lifts the field's limit for that call (see ``client.UNSET``).
    """

    # An unknown argument (another integration's ``model_path``, ``n_ctx``...) is an error,
    # not silently dropped.
    model_config = ConfigDict(arbitrary_types_allowed=True, populate_by_name=True, extra="forbid")

    model: str | None = None
    """A ``.gguf`` path, a known short name (``smollm2-135m``), ``hf://owner/repo/file.gguf``,
    or ``None`` for the ``LLAMACPP_MODEL`` environment variable."""
    engine: InferenceEngine | None = Field(default=None, exclude=True)
    """An engine to serve from instead of the registry's shared one."""
    max_tokens: int | None = None
    """Most tokens to generate; ``None`` lets the answer run to the end of its context (a call's
    ``max_tokens=None`` does so too, whatever this field says)."""
    stop: list[str] | None = Field(default=None, alias="stop_sequences")
    """Strings that end the answer (never part of it); ``stop=`` per call replaces them."""
    max_retries: int = 2
    """Retries when the engine's queue is full (``EngineOverloadedError``), before the first
    token only, for streams too."""
    parallel_tool_calls: bool = True
    """Allow several tool calls in one answer (``bind_tools`` may override it)."""
    streaming: bool = False
    """Make ``invoke`` stream internally, so callbacks get ``on_llm_new_token`` per delta."""
    reasoning: bool | None = None
    """A reasoning model's thinking: ``True``/``False`` turn it on or off through the
    template's switch (Qwen3's ``enable_thinking``), ``None`` keeps the template's default.
    Whatever the setting, a reasoning model's thinking is kept out of ``content``: it is in
    ``additional_kwargs["reasoning_content"]`` and a ``reasoning`` block of
    ``content_blocks``. Templates without a reasoning format ignore it."""

    _counter: TokenCounter | None = PrivateAttr(default=None)  # made on the first count

    def _supplied_engine(self) -> InferenceEngine | None:
        return self.engine

    def _get_engine(self, model: str | None = None) -> InferenceEngine:
        """The engine serving this model, or ``model`` for one call (kept for the next)."""
        return self.binding.get(model)

    # ---- LangChain metadata ---------------------------------------------------------------

    @property
    def _llm_type(self) -> str:
        return "llamacpp-chat"

    @property
    def model_name(self) -> str:
        """The model as the user named it; without a name (``LLAMACPP_MODEL``), the GGUF's
        file name (``client.model_display_name``), found without loading or downloading it."""
        if self.model:
            return self.model
        engine = self.binding.loaded()
        return _unloaded_name() if engine is None else model_display_name(engine.info.path)

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model, **{name: getattr(self, name) for name in SAMPLING_SETTINGS}}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(
            ls_provider=PROVIDER,
            ls_model_name=or_default(kwargs.get("model", UNSET), None) or self.model_name,
            ls_model_type="chat",
            ls_temperature=or_default(kwargs.get("temperature", UNSET), self.temperature),
        )
        max_tokens = or_default(kwargs.get("max_tokens", UNSET), self.max_tokens)
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        if stop or self.stop:
            params["ls_stop"] = stop or self.stop
        return params

    def _resolve_model_profile(self) -> ModelProfile | None:
        return model_profile(self)  # runs in the constructor: reads only what is on disk

    @property
    def placement(self) -> PlacementFacts | None:
        """Where the loaded engine put the model: ``doctor``'s machine facts (backend, layers
        offloaded, KV cache place and size, flash attention; ``profile`` has no keys for
        them), ``None`` until the engine is loaded (reading it loads nothing)."""
        return placement_facts(self.binding.loaded())

    # ---- tokens ---------------------------------------------------------------------------
    # LangChain counts synchronously, in async code too (trim_messages in an agent's step):
    # before the engine is loaded the model's vocabulary counts, never its weights.

    def _tokens(self) -> TokenCounter:
        if self._counter is None:
            self._counter = TokenCounter(self.binding, log=logger, advice=_ADVICE)
        return self._counter

    def get_token_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` (as content: no BOS) with the model's own tokenizer.

        Before the engine is loaded, the model's vocabulary alone tokenizes, read once from
        the GGUF (milliseconds, no weights; on another thread when first asked on an event
        loop, which waits for it and logs a warning). A server (``base_url``) tokenizes with
        its ``/tokenize``.
        """
        return self._tokens().tokenize(text)

    def get_num_tokens(self, text: str) -> int:
        """How many tokens ``text`` is, with the model's own tokenizer (``get_token_ids``)."""
        return len(self.get_token_ids(text))

    def get_num_tokens_from_messages(
        self,
        messages: list[BaseMessage],
        tools: Sequence[Any] | None = None,
    ) -> int:
        """Tokens of the prompt these messages (and tools) render to with the chat template,
        as the engine counts a request's prompt. Before the engine is loaded, the model's
        vocabulary and template count (see ``get_token_ids``); only images need the engine
        (its projector says what an image costs), which is then loaded."""
        specs = [convert_to_openai_tool(tool) for tool in tools] if tools else None
        engine = self.binding.loaded()
        if engine is None:
            try:
                return self._tokens().count_chat(self._count_request(messages, specs, None))
            except ImageInputNotSupportedError:
                if on_event_loop():
                    logger.warning(
                        "the event loop loads %s to count an image's tokens; count images off "
                        "the loop (asyncio.to_thread)",
                        self.model,
                    )
                engine = self._get_engine()
        reader = media_reader_for(engine.info, self.image_policy)
        return engine.count_prompt_tokens(self._count_request(messages, specs, reader))

    def _count_request(
        self,
        messages: list[BaseMessage],
        tools: list[dict[str, Any]] | None,
        read_image: ImageReader | None,
    ) -> ChatRequest:
        return ChatRequest(
            messages=to_engine_messages(messages, read_image),
            chat_template=self.chat_template,
            tools=tools,
        )

    # ---- calls ----------------------------------------------------------------------------

    def _site(self) -> CallSite:
        # LangChain's JSON parsers read a cut document leniently; the finish reason
        # ("length") tells that it was cut.
        # and a call cut short becomes one of AIMessage.invalid_tool_calls, as LangChain's
        # agents expect.
        return CallSite.of(self, "ChatLlamaCpp", cut_json="keep", cut_calls="keep")

    def _name(self, call: PreparedCall) -> str:
        return call.options.model or self.model_name

    @staticmethod
    def _call_args(
        messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], MessagesOf]:
        """A call's keywords and its messages' translation. LangChain passes ``stop=None``
        when a call names no stop strings: then the field's apply (a keyword's ``None`` would
        mean "no stop strings")."""
        keywords = kwargs if stop is None else {**kwargs, "stop": stop}
        return keywords, partial(to_engine_messages, messages)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        call = self._site().prepare(*self._call_args(messages, stop, kwargs))
        return self._chat_result(call.generate(), self._name(call))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        call = await self._site().aprepare(*self._call_args(messages, stop, kwargs))
        return self._chat_result(await call.agenerate(), self._name(call))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        call = self._site().prepare(*self._call_args(messages, stop, kwargs))
        name = self._name(call)
        for piece in call.stream():
            chunk, token = self._chunk(piece, name)
            if run_manager is not None and token:
                run_manager.on_llm_new_token(token, chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        call = await self._site().aprepare(*self._call_args(messages, stop, kwargs))
        name = self._name(call)
        async for piece in call.astream():
            chunk, token = self._chunk(piece, name)
            if run_manager is not None and token:
                await run_manager.on_llm_new_token(token, chunk=chunk)
            yield chunk

    # ---- LangChain objects ----------------------------------------------------------------

    def _chat_result(self, result: CallResult, name: str) -> ChatResult:
        fields = _message_fields(name, result)
        if result.tool_calls:
            fields["additional_kwargs"]["tool_calls"] = openai_tool_calls(result.tool_calls)
        message = AIMessage(
            tool_calls=tool_calls_to_langchain(result.tool_calls),
            invalid_tool_calls=invalid_tool_calls(result.invalid_calls),
            **fields,
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _chunk(self, piece: ToolStreamChunk, name: str) -> tuple[ChatGenerationChunk, str]:
        """The LangChain chunk of a piece, and the new text callbacks hear of (``""``:
        nothing to report)."""
        message = AIMessageChunk(
            tool_call_chunks=tool_call_chunks(piece.tool_call_deltas),
            chunk_position="last" if piece.finish_reason is not None else None,
            **_message_fields(name, piece),
        )
        return ChatGenerationChunk(message=message), piece.text

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
        return structured_output(self, schema, method, include_raw=include_raw)
