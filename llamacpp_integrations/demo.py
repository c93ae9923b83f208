"""``llamacpp-integrations demo``: what the package is for, in about a minute on a small model.

1. LangChain: a prompt-template chain whose model must call a tool; the call (valid by
   grammar) is run and its result goes back for the answer.
2. LlamaIndex: a RAG query over a few documents, embedded and answered on the same loaded
   weights as the LangChain model.
3. Batching: the same prompts answered one after another, then all together in one batch,
   with the measured speed-up.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from .engine.worker.host import loaded_weights

__all__ = ["run_demo"]

DOCUMENTS = [
    "The Zorblax fruit is bright purple and tastes like lemon and pepper.",
    "Mount Kelvar, the highest peak of the Tessar range, is 4,210 metres tall.",
    "The river Ulm flows north through the town of Brask into the Grey Sea.",
    "Brask holds a lantern festival every autumn on the longest night of October.",
]
QUESTIONS = [
    "Name a colour.",
    "Say hello in French.",
    "What is 2 + 2?",
    "Name a fruit.",
    "Give me a word that rhymes with cat.",
    "Name a planet.",
    "What do bees make?",
    "Name an ocean.",
]


class Progress:
    """A one-line progress display on a terminal; plain lines elsewhere (logs, CI)."""

    def __init__(self, out: TextIO, total: int, label: str) -> None:
        self._out, self._total, self._label = out, total, label
        self._done = 0
        self._live = out.isatty()
        self._show()

    def step(self) -> None:
        self._done += 1
        self._show()

    def _show(self) -> None:
        if not self._live:
            return
        filled = round(20 * self._done / self._total)
        bar = "#" * filled + "." * (20 - filled)
        self._out.write(f"\r  {self._label:<26} [{bar}] {self._done}/{self._total}")
        self._out.flush()

    def close(self, summary: str) -> None:
        if self._live:
            self._out.write("\r" + " " * 70 + "\r")
        self._out.write(f"  {self._label:<26} {summary}\n")


def _langchain_tool_chain(llm: Any, say: Callable[[str], None]) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city (canned: this demo reaches no network)."""
        return f"In {city} it is 14 degrees and cloudy."

    prompt = ChatPromptTemplate.from_messages([("user", "What is the weather in {city}?")])
    # A call needs room whatever --max-tokens says: a cut call is no call.
    chain = prompt | llm.bind_tools([get_weather], tool_choice="get_weather", max_tokens=96)
    question = prompt.invoke({"city": "Oslo"}).to_messages()[0]
    reply = chain.invoke({"city": "Oslo"})
    call = reply.tool_calls[0]
    say(f"  tool call (grammar-constrained): {call['name']}({call['args']})")
    result = get_weather.invoke(call["args"])
    say(f"  tool result: {result}")
    answer = llm.invoke(
        [HumanMessage(question.content), reply, ToolMessage(result, tool_call_id=call["id"])]
    )
    say(f"  answer: {str(answer.content).strip()}")


def _llama_index_rag(llm: Any, embed_model: Any, say: Callable[[str], None]) -> None:
    from llama_index.core import Document, VectorStoreIndex

    index = VectorStoreIndex.from_documents(
        [Document(text=text) for text in DOCUMENTS], embed_model=embed_model
    )
    question = "What colour is the Zorblax fruit?"
    response = index.as_query_engine(llm=llm, similarity_top_k=1).query(question)
    say(f"  question: {question}")
    say(f"  retrieved: {response.source_nodes[0].node.get_content()}")
    say(f"  answer: {str(response).strip()}")


def _batching(llm: Any, out: TextIO, say: Callable[[str], None]) -> None:
    def tokens(replies: list[Any]) -> int:
        return sum(reply.usage_metadata["output_tokens"] for reply in replies)

    progress = Progress(out, len(QUESTIONS), "one after another")
    start = time.perf_counter()
    replies = []
    for question in QUESTIONS:
        replies.append(llm.invoke(question))
        progress.step()
    sequential = time.perf_counter() - start
    sequential_rate = tokens(replies) / sequential
    progress.close(f"{sequential:5.2f} s, {sequential_rate:6.1f} generated tokens/s")

    progress = Progress(out, len(QUESTIONS), "together (one batch)")

    async def together() -> list[Any]:
        async def one(question: str) -> Any:
            reply = await llm.ainvoke(question)
            progress.step()
            return reply

        return await asyncio.gather(*(one(question) for question in QUESTIONS))

    start = time.perf_counter()
    replies = asyncio.run(together())
    batched = time.perf_counter() - start
    batched_rate = tokens(replies) / batched
    progress.close(f"{batched:5.2f} s, {batched_rate:6.1f} generated tokens/s")
    say(f"  speed-up from batching: {batched_rate / sequential_rate:.2f}x tokens/s")


def run_demo(model: str, max_tokens: int = 48, out: TextIO = sys.stdout) -> int:
    """Run the three parts on ``model``; returns the process exit code."""

    def say(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    # The demo shows both frameworks on a local model: each missing extra is named
    # (MissingDependencyError) before anything loads.
    from .engine.engine import Engine  # noqa: F401  (the local extra)
    from .langchain import ChatLlamaCpp
    from .llama_index import LlamaCpp, LlamaCppEmbedding

    # Held to the end: the weights stay loaded once for all three parts.
    chat = ChatLlamaCpp(model=model, temperature=0, max_tokens=max_tokens, n_seq_max=8)
    llm = LlamaCpp(model=model, temperature=0, max_tokens=max_tokens)
    embed_model = LlamaCppEmbedding(model=model)
    say(f"model: {model}\n")
    say("1. LangChain: a prompt-template chain that must call a tool")
    _langchain_tool_chain(chat, say)
    say("\n2. LlamaIndex: RAG over four local documents")
    _llama_index_rag(llm, embed_model, say)
    say(f"\n3. {len(QUESTIONS)} prompts, {max_tokens} tokens at most each")
    _batching(chat, out, say)
    engines = len({id(chat.binding.get()), id(llm.engine), id(embed_model.engine)})
    say(f"\nadapters: 3, engines: {engines}, loaded copies of the weights: {len(loaded_weights())}")
    return 0
