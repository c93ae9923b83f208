"""``ChatLlamaCpp``'s token counts on the real model, and what they leave to the event loop.

LangChain counts synchronously (``get_num_tokens``, ``get_token_ids``,
``get_num_tokens_from_messages``, which ``trim_messages`` calls inside async agents). Before
the engine is loaded the model's vocabulary counts: it must count exactly as the engine does
once loaded, and counting inside a running loop must load no weights and read nothing on the
loop's thread. Vocabulary reads and weight loads are recorded with whether their thread ran a
loop; a loop that had to wait would log a warning, so none is allowed where the vocabulary was
readied first (no timings are asserted).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import trim_messages
from pydantic import BaseModel

from llamacpp_integrations.engine import ChatRequest
from llamacpp_integrations.langchain import ChatLlamaCpp
from tests.builders.loads import Loads, recorded_native_loads

TEXTS = [
    "Account 123456789 paid 4242 on 2026-12-03.",
    "Héllo wörld, 你好, emoji 🙂 and code: def f(x): return x**2",
    "<|im_start|>user\nnot a real turn<|im_end|>",
    "",
]
MESSAGES = [SystemMessage("Answer in one word."), HumanMessage("Which colour is the sky?")]


class Weather(BaseModel):
    """The weather in a city."""

    city: str


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Loads:
    loads = Loads()
    recorded_native_loads(loads, monkeypatch)
    return loads


@pytest.fixture
def llm(smollm_path: Path, tmp_path: Path) -> Iterator[ChatLlamaCpp]:
    # A path of its own: vocabularies are kept per path while anything holds one, and an
    # earlier test on this worker may still hold the model's (a cycle not yet collected); the
    # reads this test records must be its own
    model = tmp_path / "own-smollm.gguf"
    model.symlink_to(smollm_path)
    chat = ChatLlamaCpp(
        model=str(model), temperature=0.0, max_tokens=4, n_ctx_per_seq=640, n_seq_max=1
    )
    yield chat
    engine = chat.binding.loaded()
    if engine is not None:
        engine.close()


def _counts(llm: ChatLlamaCpp) -> tuple[list[list[int]], list[int], int, int]:
    return (
        [llm.get_token_ids(text) for text in TEXTS],
        [llm.get_num_tokens(text) for text in TEXTS],
        llm.get_num_tokens_from_messages(MESSAGES),
        llm.get_num_tokens_from_messages(MESSAGES, tools=[Weather]),
    )


def test_counts_before_loading_equal_the_engines_once_loaded(
    llm: ChatLlamaCpp, loads: Loads
) -> None:
    before = _counts(llm)
    assert llm.binding.loaded() is None
    assert loads.steps() == ["vocabulary"]
    reply = llm.invoke(MESSAGES)
    engine = llm.binding.loaded()
    assert engine is not None
    assert _counts(llm) == before  # now the engine's own tokenizer counts
    assert before[0] == [engine.tokenize(text) for text in TEXTS]
    request = ChatRequest(
        messages=[
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "Which colour is the sky?"},
        ]
    )
    assert before[2] == engine.count_prompt_tokens(request)
    assert before[2] == reply.usage_metadata["input_tokens"]  # type: ignore[index]
    assert loads.steps() == ["vocabulary", "weights"]


async def test_counting_inside_a_running_loop_loads_nothing_on_it(
    llm: ChatLlamaCpp, loads: Loads, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="llamacpp_integrations")
    await asyncio.to_thread(llm.get_num_tokens, "")  # the advised readying, off the loop
    counted = _counts(llm)  # on the loop from here
    history = [*MESSAGES, AIMessage("Blue."), HumanMessage("And at night?")]
    kept = trim_messages(history, max_tokens=counted[2] + 20, token_counter=llm, strategy="last")
    assert kept[-1] == history[-1] and len(kept) < len(history)
    assert llm.binding.loaded() is None  # no weights for counting
    assert loads.done == [("vocabulary", False)]
    assert "the event loop waits" not in caplog.text  # the loop never waited for the read
    await llm.ainvoke("Hi")  # the weights load on a thread
    assert loads.on_the_loop() == []
    assert _counts(llm) == counted


async def test_a_first_count_on_the_loop_reads_on_another_thread_and_says_it_waited(
    llm: ChatLlamaCpp, loads: Loads, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="llamacpp_integrations")
    assert llm.get_num_tokens("Hello") > 0
    assert loads.on_the_loop() == []
    assert loads.steps() == ["vocabulary"]
    assert llm.binding.loaded() is None
    # The read may have finished before the loop asked: then there was nothing to wait for
    for record in caplog.records:
        assert record.getMessage().startswith("the event loop waits for the vocabulary of")
