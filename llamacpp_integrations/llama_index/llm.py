"""``LlamaCpp``: a LlamaIndex function-calling LLM served by the shared in-process engine.

Translation only: fields, LlamaIndex messages in, LlamaIndex responses out. Binding the engine,
merging call options, planning tool and structured calls and running them live in
``llamacpp_integrations.client``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from contextlib import aclosing, closing
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    MessageRole,
)
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.constants import DEFAULT_NUM_OUTPUTS
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection

from ..client import (
    CallSettings,
    CallSite,
    EngineSettings,
    MessagesOf,
    PreparedCall,
    SamplingSettings,
    engine_settings_of,
    model_display_name,
)
from ..client.model_facts import audio_inputs, image_inputs, placement_facts
from ..engine import InferenceEngine
from .messages import to_engine_messages, tools_to_openai
from .metadata import LlamaCppMetadata
from .responses import chat_response, completion_response, tool_selections
from .streaming import ChatStream, CompletionStream
from .structured_predict import GrammarStructuredPredict
from .tool_calls import chat_with_tools_kwargs, first_call_only
from .window import ModelTokenizer, WindowReader, context_window

if TYPE_CHECKING:
    from llama_index.core.tools.types import BaseTool

__all__ = ["LlamaCpp"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _chat_callback(fn: _F) -> _F:
    # LlamaIndex's decorators are untyped; they fire callbacks and instrumentation events.
    return cast(_F, llm_chat_callback()(fn))


def _completion_callback(fn: _F) -> _F:
    return cast(_F, llm_completion_callback()(fn))


class LlamaCpp(
    GrammarStructuredPredict, FunctionCallingLLM, SamplingSettings, CallSettings, EngineSettings
):
    """A local GGUF model as a LlamaIndex function-calling LLM.

    Generation runs on this package's shared engine: every ``LlamaCpp``, ``LlamaCppEmbedding``
    (and LangChain class) built with the same ``model`` and engine settings serves from one
    engine, so from one copy of the weights, with continuous batching across all of them; with
    other settings they still share the weights. The engine is created on first use (or pass
    ``engine=`` to use one you made).

    Example::

        llm = LlamaCpp(model="smollm2-135m", temperature=0.2, max_tokens=128)
        print(llm.complete("Name a colour.").text)
        response = llm.chat_with_tools([weather_tool], user_msg="Weather in Paris?")
        calls = llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)

    Every method has an async twin that awaits the engine directly (it never blocks the event
    loop; the very first call loads the model on a worker thread). Tool calling and structured
    output are constrained by grammars built from the JSON schemas, so every returned call names
    an offered tool with valid arguments and every structured answer validates, whatever the
    model.

    ``metadata.context_window`` is the engine's per-sequence context (``n_ctx_per_seq``) less
    32 tokens for the chat template's framing, which LlamaIndex does not count: each request runs
    in one sequence of the batch, so that is what one prompt plus its answer fits.
    Reading it loads nothing (before the first call it comes from the GGUF header). LlamaIndex
    counts tokens with its global ``Settings.tokenizer`` (tiktoken unless set); set
    ``Settings.tokenizer = llm.tokenizer`` so retrieved text is packed into that window in this
    model's own tokens.

    Keyword arguments of ``chat`` / ``complete`` (and of ``llm_kwargs``) override the fields of
    the same names for one call: the sampling fields, ``max_tokens``, ``stop``, ``timeout``,
    ``logprobs``, ``top_logprobs``, ``chat_template``, and ``model`` (another model for this
    call). A keyword left out keeps the field; ``None`` means "none": ``complete(prompt,
    max_tokens=None)`` runs to the end of the sequence's context, not to the field's 256
    tokens (see ``client.UNSET``). ``chat`` also takes ``tools`` (OpenAI-style dicts or
    LlamaIndex tools), ``tool_choice`` (``"auto"``, ``"none"``, ``"required"`` / ``"any"`` /
    ``True``, a tool name, or ``{"type": "function", "function": {"name": ...}}``),
    ``parallel_tool_calls`` and ``response_format`` (a pydantic class, ``{"type":
    "json_object"}`` or an OpenAI ``json_schema`` format). Unknown keyword arguments raise
    ``UnknownOptionError`` (an ``InvalidRequestError``).

    Responses: ``raw`` holds the engine's report (``id``, ``model``, ``finish_reason``,
    ``usage`` with ``cached_prompt_tokens``, ``timings``); ``additional_kwargs`` the token
    counts as llama-index-llms-openai reports them; tool calls are ``ToolCallBlock`` s of the
    message and, OpenAI-shaped, its ``additional_kwargs["tool_calls"]``. Streamed responses are
    cumulative (``message`` so far, ``delta`` new); the last one carries usage and timings.
    """

    # An unknown argument (``model_path``, ``context_window``...) is an error, not dropped.
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    model: str | None = Field(
        default=None,
        description="A .gguf path, a known short name (e.g. 'smollm2-135m'), "
        "'hf://owner/repo/file.gguf', or None for the LLAMACPP_MODEL environment variable.",
    )
    max_tokens: int | None = Field(
        default=DEFAULT_NUM_OUTPUTS,
        ge=1,
        description="Most tokens generated per call (None: until the model stops or the "
        "sequence's context is full; a call's max_tokens=None lifts it for that call). "
        "Reported as metadata.num_output.",
    )
    stop: list[str] | None = Field(default=None, description="Strings that end generation.")
    max_retries: int = Field(
        default=2,
        ge=0,
        description="Retries when the engine's queue is full, before the first token only.",
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
    thinking: bool | None = Field(
        default=None,
        description="A reasoning model's thinking: True/False turn it on or off through the "
        "template's switch (Qwen3's enable_thinking), None keeps the template's default. "
        "Whatever the setting, the thinking is kept out of the answer's text: it is the "
        "message's ThinkingBlock (streamed as additional_kwargs['thinking_delta']). Templates "
        "without a reasoning format ignore it.",
    )

    _given_engine: InferenceEngine | None = PrivateAttr(default=None)
    _window: WindowReader | None = PrivateAttr(default=None)
    _tokenizer: ModelTokenizer | None = PrivateAttr(default=None)

    def __init__(self, *, engine: InferenceEngine | None = None, **data: Any) -> None:
        """Build the LLM; ``engine`` serves it instead of the shared engine for ``model``."""
        super().__init__(**data)
        self._given_engine = engine

    @classmethod
    def class_name(cls) -> str:
        return "llamacpp_integrations_llm"

    # ---- the engine -----------------------------------------------------------------------

    def _supplied_engine(self) -> InferenceEngine | None:
        return self._given_engine

    def _engine_settings(self) -> dict[str, Any]:
        return engine_settings_of(self, self.engine_kwargs)

    @property
    def engine(self) -> InferenceEngine:
        """The engine serving this LLM (loading the model on first use)."""
        return self.binding.get()

    @property
    def metadata(self) -> LlamaCppMetadata:
        """Context window (the engine's per-sequence context less ``FRAMING_RESERVE``), output
        budget and model name; whether messages may carry images, and where the engine put
        the model (``placement``: ``doctor``'s machine facts, ``None`` until it is loaded).

        Read without loading the model: from the engine once it is loaded, before that from
        the GGUF header and the engine settings (see ``WindowReader``).
        """
        if self._window is None:
            self._window = WindowReader(self.binding)
        window = self._window()
        engine = self.binding.loaded()
        mmproj = None if engine is not None else self._engine_settings().get("mmproj")
        return LlamaCppMetadata(
            context_window=context_window(window),
            num_output=self.max_tokens or DEFAULT_NUM_OUTPUTS,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name=window.name,
            image_inputs=image_inputs(engine, mmproj, model=self.model, model_path=None),
            audio_inputs=audio_inputs(engine, mmproj),
            placement=placement_facts(engine),
        )

    @property
    def tokenizer(self) -> ModelTokenizer:
        """The model's tokenizer as LlamaIndex takes one: ``Settings.tokenizer = llm.tokenizer``
        makes LlamaIndex count prompt sizes in this model's tokens. Getting it loads no
        weights; it readies the model's vocabulary (see ``ModelTokenizer``), so get it before
        the event loop starts where you can."""
        if self._tokenizer is None:
            self._tokenizer = ModelTokenizer(self.binding)
        return self._tokenizer

    # ---- calls ----------------------------------------------------------------------------

    def _site(self) -> CallSite:
        # A call cut short by max_tokens is reported (raw["invalid_tool_calls"]), not raised:
        # the agent then reads the answer as a reply instead of failing the run.
        site = CallSite.of(self, "LlamaCpp", cut_calls="keep")
        # LlamaIndex spells the reasoning switch ``thinking`` (as its Ollama LLM does).
        return replace(site, defaults={**site.defaults, "reasoning": self.thinking})

    @staticmethod
    def _chat_args(
        kwargs: dict[str, Any], messages: Sequence[ChatMessage]
    ) -> tuple[dict[str, Any], MessagesOf]:
        """A chat call's keywords (``thinking`` renamed, LlamaIndex tools as OpenAI dicts) and
        its messages' translation."""
        return _with_openai_tools(_thinking_renamed(kwargs)), partial(to_engine_messages, messages)

    def _chat(self, kwargs: dict[str, Any], messages: Sequence[ChatMessage]) -> PreparedCall:
        return self._site().prepare(*self._chat_args(kwargs, messages))

    async def _achat(self, kwargs: dict[str, Any], messages: Sequence[ChatMessage]) -> PreparedCall:
        return await self._site().aprepare(*self._chat_args(kwargs, messages))

    def _completion_args(
        self, kwargs: dict[str, Any], prompt: str, formatted: bool
    ) -> tuple[dict[str, Any], MessagesOf | None, str | None]:
        """A completion call's keywords and its prompt: one user message of a chat (its
        translation), or raw text when ``raw_completion`` is set."""
        kwargs = _thinking_renamed(kwargs)
        if self.raw_completion:
            if not formatted and self.completion_to_prompt is not None:
                prompt = self.completion_to_prompt(prompt)
            return kwargs, None, prompt
        user = [ChatMessage(role=MessageRole.USER, content=prompt)]
        return kwargs, partial(to_engine_messages, user), None

    def _completion(self, kwargs: dict[str, Any], prompt: str, formatted: bool) -> PreparedCall:
        keywords, messages_of, raw = self._completion_args(kwargs, prompt, formatted)
        return self._site().prepare(keywords, messages_of, prompt=raw, chat=False)

    async def _acompletion(
        self, kwargs: dict[str, Any], prompt: str, formatted: bool
    ) -> PreparedCall:
        keywords, messages_of, raw = self._completion_args(kwargs, prompt, formatted)
        return await self._site().aprepare(keywords, messages_of, prompt=raw, chat=False)

    @staticmethod
    def _name(call: PreparedCall) -> str:
        return model_display_name(call.engine.info.path)

    # ---- chat -----------------------------------------------------------------------------

    @_chat_callback
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """One answer to ``messages``; with ``tools``, it may call them (see the class doc)."""
        call = self._chat(kwargs, messages)
        return chat_response(call.generate(), self._name(call))

    @_chat_callback
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Async :meth:`chat`."""
        call = await self._achat(kwargs, messages)
        return chat_response(await call.agenerate(), self._name(call))

    @_chat_callback
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """Cumulative responses: ``message`` holds the text (and tool calls) so far, ``delta``
        the new text; the last one has the usage in ``raw`` and ``additional_kwargs``."""
        call = self._chat(kwargs, messages)
        return _responses(call.stream(), ChatStream(self._name(call)).read)

    @_chat_callback
    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        """Async :meth:`stream_chat`."""
        call = await self._achat(kwargs, messages)
        return _aresponses(call.astream(), ChatStream(self._name(call)).read)

    # ---- completion -----------------------------------------------------------------------

    @_completion_callback
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Complete ``prompt``: as one user message of a chat, or as raw text when
        ``raw_completion`` is set (then ``completion_to_prompt`` applies unless
        ``formatted``)."""
        call = self._completion(kwargs, prompt, formatted)
        return completion_response(call.generate(), self._name(call))

    @_completion_callback
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        """Async :meth:`complete`."""
        call = await self._acompletion(kwargs, prompt, formatted)
        return completion_response(await call.agenerate(), self._name(call))

    @_completion_callback
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        """Cumulative completion responses (``text`` so far, ``delta`` new)."""
        call = self._completion(kwargs, prompt, formatted)
        return _responses(call.stream(), CompletionStream(self._name(call)).read)

    @_completion_callback
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        """Async :meth:`stream_complete`."""
        call = await self._acompletion(kwargs, prompt, formatted)
        return _aresponses(call.astream(), CompletionStream(self._name(call)).read)

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
        return chat_with_tools_kwargs(
            tools,
            user_msg,
            chat_history,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            tool_choice=tool_choice,
            **kwargs,
        )

    def _validate_chat_with_tools_response(
        self,
        response: ChatResponse,
        tools: Sequence[BaseTool],
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        """Keep only the first call unless parallel calls were allowed (the grammar already
        allows one call then; this also covers a caller-supplied ``parallel_tool_calls``)."""
        return response if allow_parallel_tool_calls else first_call_only(response)

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


def _thinking_renamed(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Call keywords with LlamaIndex's ``thinking`` as the engine's ``reasoning`` option."""
    if "thinking" not in kwargs:
        return kwargs
    return {("reasoning" if key == "thinking" else key): value for key, value in kwargs.items()}


def _with_openai_tools(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with LlamaIndex tools in ``tools`` as OpenAI tool dicts (dicts stay)."""
    tools = kwargs.get("tools")
    if not tools:
        return kwargs
    converted = [tools_to_openai([t])[0] if hasattr(t, "metadata") else t for t in tools]
    return {**kwargs, "tools": converted}


_R = TypeVar("_R")


def _responses(
    pieces: Generator[Any, None, None], read: Callable[[Any], _R | None]
) -> Generator[_R, None, None]:
    with closing(pieces):
        for piece in pieces:
            if (response := read(piece)) is not None:
                yield response


async def _aresponses(
    pieces: AsyncGenerator[Any, None], read: Callable[[Any], _R | None]
) -> AsyncGenerator[_R, None]:
    async with aclosing(pieces):
        async for piece in pieces:
            if (response := read(piece)) is not None:
                yield response
