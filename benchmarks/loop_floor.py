"""The event-loop gaps an application would see without our engine: the floor under
``loop_stall.py``'s figures, measured in the same run.

Two floors, each with the same heartbeat as the adapters' rows:

``decode``
    A bare ``llama_decode`` loop on a thread (llama-cpp-python's low-level calls, no engine,
    no framework), one token for each of N sequences a step, with the engine's thread count.
    The loop's thread then competes with llama.cpp's threads for the CPUs: what is left is the
    operating system's scheduling (on a machine whose cores all decode, a thread that wakes
    waits for one).
``long-slice decode``
    The same thread asking Linux for the engine's long time slice
    (``engine/worker/time_slice.py``): how much of that floor the request takes away.
``langchain``, ``llamaindex``
    The same decode thread, and N concurrent calls of a stand-in chat model of each framework
    (a ``BaseChatModel`` and a LlamaIndex ``LLM`` whose streams yield one chunk per decode
    step, handed over as our engine hands its tokens over). What the frameworks themselves do
    on the loop per call and per chunk, with nothing of ours in it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import llama_cpp
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    LLMMetadata,
)
from llama_index.core.llms import LLM
from llama_index.core.llms.callbacks import llm_chat_callback

from llamacpp_integrations.engine.worker.time_slice import ask_for_time_slice

__all__ = ["DecodeThread", "all_floor_calls"]


class DecodeThread:
    """``llama_decode`` of one token for each of ``n_seq`` sequences, step after step, on a
    thread of its own, until ``stop``; after every step, ``on_step`` is called on ``loop``."""

    def __init__(
        self, model_path: str, n_seq: int, n_threads: int, *, time_slice_ns: int | None = None
    ) -> None:
        params = llama_cpp.llama_model_default_params()
        self._model = llama_cpp.llama_model_load_from_file(model_path.encode(), params)
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = 256 * n_seq
        ctx_params.n_batch = ctx_params.n_ubatch = max(n_seq, 32)
        ctx_params.n_seq_max = n_seq
        ctx_params.n_threads = ctx_params.n_threads_batch = n_threads
        ctx_params.flash_attn_type = 0  # as the engine decodes on the CPU
        ctx_params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(self._model, ctx_params)
        self._batch = llama_cpp.llama_batch_init(ctx_params.n_batch, 0, 1)
        self.n_seq = n_seq
        self.time_slice_ns = time_slice_ns
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listeners: list[Callable[[], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def listen(self, on_step: Callable[[], None]) -> Callable[[], None]:
        """Call ``on_step`` on the loop after each step; the function that stops it."""
        self._listeners.append(on_step)
        return lambda: self._listeners.remove(on_step)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="floor-decode", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def close(self) -> None:
        self.stop()
        llama_cpp.llama_batch_free(self._batch)
        llama_cpp.llama_free(self._ctx)
        llama_cpp.llama_model_free(self._model)

    def _run(self) -> None:
        if self.time_slice_ns is not None:  # as the engine's worker asks, before its first decode
            ask_for_time_slice(self.time_slice_ns)
        batch, memory = self._batch, llama_cpp.llama_get_memory(self._ctx)
        step = 0
        while not self._stop.is_set():
            pos = step % 200  # a short window, read again from the start
            if pos == 0:
                llama_cpp.llama_memory_clear(memory, True)
            for seq in range(self.n_seq):
                batch.token[seq] = 1
                batch.pos[seq] = pos
                batch.n_seq_id[seq] = 1
                batch.seq_id[seq][0] = seq
                batch.logits[seq] = True
            batch.n_tokens = self.n_seq
            llama_cpp.llama_decode(self._ctx, batch)
            step += 1
            if self._listeners and self._loop is not None:
                self._loop.call_soon_threadsafe(self._stepped)

    def _stepped(self) -> None:
        for on_step in list(self._listeners):
            on_step()


class _Steps:
    """The decode thread's steps as an async iterator of ``count`` items (one per step)."""

    def __init__(self, decode: DecodeThread, count: int) -> None:
        self._queue: asyncio.Queue[None] = asyncio.Queue()
        self._count = count
        self._unlisten = decode.listen(lambda: self._queue.put_nowait(None))

    async def __aiter__(self) -> AsyncIterator[int]:
        try:
            for index in range(self._count):
                await self._queue.get()
                yield index
        finally:
            self._unlisten()


class StandInChatModel(BaseChatModel):
    """A LangChain chat model whose answer is ``max_tokens`` chunks, one per decode step."""

    decode: Any
    max_tokens: int = 32

    @property
    def _llm_type(self) -> str:
        return "stand-in"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("x"))])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        async for _ in _Steps(self.decode, self.max_tokens):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=" word"))
            if run_manager is not None:
                await run_manager.on_llm_new_token(" word", chunk=chunk)
            yield chunk


class StandInLLM(LLM):
    """A LlamaIndex LLM whose ``astream_chat`` yields ``max_tokens`` cumulative responses,
    one per decode step; the rest is not used here."""

    decode: Any
    max_tokens: int = 32

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_chat_model=True, model_name="stand-in")

    @llm_chat_callback()
    async def astream_chat(self, messages: Any, **kwargs: Any) -> ChatResponseAsyncGen:
        async def responses() -> ChatResponseAsyncGen:
            text = ""
            async for _ in _Steps(self.decode, self.max_tokens):
                text += " word"
                message = ChatMessage(role="assistant", content=text)
                yield ChatResponse(message=message, delta=" word")

        return responses()

    def _unused(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("only astream_chat is used by the floor")

    chat = complete = stream_chat = stream_complete = _unused  # type: ignore[assignment]
    achat = acomplete = astream_complete = _unused  # type: ignore[assignment]


def floor_calls(
    decode: DecodeThread, max_tokens: int, system: str
) -> dict[str, Callable[[str], Awaitable[object]]]:
    """Each framework's call of one question on its stand-in model."""
    chat = StandInChatModel(decode=decode, max_tokens=max_tokens)
    index = StandInLLM(decode=decode, max_tokens=max_tokens)

    async def langchain(question: str) -> object:
        messages = [SystemMessage(system), HumanMessage(question)]
        return [chunk async for chunk in chat.astream(messages)]

    async def llamaindex(question: str) -> object:
        chats = [
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=question),
        ]
        return [response async for response in await index.astream_chat(chats)]

    return {"langchain": langchain, "llamaindex": llamaindex}


def _idle(decode: DecodeThread, max_tokens: int) -> Callable[[str], Awaitable[object]]:
    """No framework: a call only waits for the decode thread's ``max_tokens`` steps."""

    async def wait(question: str) -> object:
        return [index async for index in _Steps(decode, max_tokens)]

    return wait


def all_floor_calls(
    decode: DecodeThread, max_tokens: int, system: str
) -> Iterator[tuple[str, Callable[[str], Awaitable[object]]]]:
    """The floors by name: ``decode`` (calls that only wait for the steps) first, then the
    frameworks' stand-ins."""
    yield "decode", _idle(decode, max_tokens)
    yield from floor_calls(decode, max_tokens, system).items()
