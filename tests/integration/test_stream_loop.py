"""What concurrent streams leave to the event loop: nothing that waits on the engine.

Sixteen streams at once through ``ChatLlamaCpp.astream`` and LlamaIndex's ``astream_chat`` on
the shared engine: every engine call that renders, tokenizes, detokenizes or queues
synchronously is recorded with whether its thread was running an event loop, and none may have
been (those run on threads; the loop only reads chunks). The streamed text, however the chunks
were batched for a reader that fell behind, adds up to the request's whole answer. No timings
are asserted (``benchmarks/loop_stall.py`` measures the loop's gaps).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from llama_index.core.llms import ChatMessage

from llamacpp_integrations.client.counting import on_event_loop
from llamacpp_integrations.engine import Engine
from llamacpp_integrations.engine.worker.inbox import Inbox
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp

BLOCKING = {
    Engine: ("_prepare", "render_chat", "tokenize", "detokenize", "prompt_tokens", "submit"),
    Inbox: ("put",),
}
TOPICS = ["rivers", "owls", "bread", "glass", "tides", "comets", "bees", "salt"] * 2


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """The blocking engine calls made, each with whether it ran on an event loop's thread."""
    called: list[tuple[str, bool]] = []
    for owner, names in BLOCKING.items():
        for name in names:
            original: Callable[..., Any] = getattr(owner, name)

            def recorded(*args: Any, _name: str = name, _fn: Any = original, **kw: Any) -> Any:
                called.append((_name, on_event_loop()))
                return _fn(*args, **kw)

            monkeypatch.setattr(owner, name, recorded)
    return called


def test_sixteen_streams_leave_the_loop_only_chunks_to_read(
    engine: Engine, calls: list[tuple[str, bool]]
) -> None:
    chat = ChatLlamaCpp(engine=engine, temperature=0.0, max_tokens=8)
    index = LlamaCpp(engine=engine, temperature=0.0, max_tokens=8)

    async def langchain(topic: str) -> tuple[str, str]:
        text = "".join([str(c.content) async for c in chat.astream([HumanMessage(topic)])])
        return text, text

    async def llamaindex(topic: str) -> tuple[str, str]:
        messages = [ChatMessage(role="user", content=topic)]
        responses = [r async for r in await index.astream_chat(messages)]
        return "".join(r.delta or "" for r in responses), str(responses[-1].message.content)

    async def run() -> list[tuple[str, str]]:
        streams = [langchain(f"Tell me about {t}.") for t in TOPICS[:8]]
        streams += [llamaindex(f"Describe {t}.") for t in TOPICS[8:]]
        return await asyncio.gather(*streams)

    answers = asyncio.run(run())
    assert [name for name, _ in calls].count("_prepare") == 16  # every request, off the loop
    assert [name for name, on_loop in calls if on_loop] == []
    # LlamaIndex's streamed deltas add up to its last, cumulative message.
    assert all(streamed == whole for streamed, whole in answers[8:])
    assert all(streamed for streamed, _ in answers[:8])
