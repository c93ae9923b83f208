"""Embedding bookkeeping without llama.cpp: the queue's batches and the prefix table."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from llamacpp_integrations.client.embedding_prefixes import Prefixes, prefixes_for
from llamacpp_integrations.engine.channel import EventChannel
from llamacpp_integrations.engine.embedding_queue import EmbeddingQueue
from llamacpp_integrations.engine.requests import EmbedJob


def _job(lengths: list[int], request_id: str = "r") -> tuple[EmbedJob, EventChannel]:
    channel = EventChannel()
    job = EmbedJob(
        request_id=request_id,
        token_lists=[[1] * n for n in lengths],
        normalize=False,
        submitted_at=0.0,
        deadline=None,
        channel=channel,
    )
    return job, channel


def test_a_text_longer_than_a_cut_budget_still_goes_alone() -> None:
    queue = EmbeddingQueue()
    job, channel = _job([300, 10])
    queue.add([job])
    seen: list[list[int]] = []

    def embed(lists: list[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        seen.append([len(t) for t in lists])
        return [np.ones(2, dtype=np.float32) for _ in lists]

    queue.step(embed, max_tokens=100, max_texts=8)  # the budget chats leave is below 300
    queue.step(embed, max_tokens=100, max_texts=8)
    assert seen == [[300], [10]]
    assert not queue
    assert len(channel.get(lambda: True)) == 2  # type: ignore[arg-type]


def test_texts_from_many_jobs_share_a_decode() -> None:
    queue = EmbeddingQueue()
    a, _ = _job([5, 5], "a")
    b, _ = _job([5], "b")
    queue.add([a, b])
    seen: list[int] = []

    def embed(lists: list[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        seen.append(len(lists))
        return [np.ones(2, dtype=np.float32) for _ in lists]

    queue.step(embed, max_tokens=100, max_texts=8)
    assert seen == [3] and not queue


def test_prefix_table() -> None:
    nomic = Prefixes("search_query: ", "search_document: ")
    assert prefixes_for("nomic-bert", None) == nomic
    assert prefixes_for("bert", "nomic-embed-text-v1.5") == nomic
    assert prefixes_for("bert", "multilingual-e5-small") == Prefixes("query: ", "passage: ")
    assert prefixes_for("bert", "bge-small-en-v1.5").query.startswith("Represent")
    assert prefixes_for("xlm-roberta", "bge-m3") == Prefixes()
    assert prefixes_for("qwen3", "Qwen3-Embedding-0.6B").query.startswith("Instruct:")
    # unknown models, and names that only contain the letters, get nothing
    assert prefixes_for("llama", "SmolLM2 135M Instruct") == Prefixes()
    assert prefixes_for("llama", "phi3e5x") == Prefixes()
    assert prefixes_for("bert", None) == Prefixes()


def test_chunks_are_averaged_by_their_tokens() -> None:
    queue = EmbeddingQueue()
    channel = EventChannel()
    job = EmbedJob(
        request_id="c",
        token_lists=[[1] * 3, [1] * 1, [1] * 2],
        normalize=False,
        submitted_at=0.0,
        deadline=None,
        channel=channel,
        chunks=[2, 1],
    )
    queue.add([job])
    rows = iter([[1.0, 0.0], [0.0, 4.0], [2.0, 2.0]])

    def embed(lists: list[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        return [np.asarray(next(rows), dtype=np.float32) for _ in lists]

    queue.step(embed, max_tokens=100, max_texts=8)
    got = channel.get(lambda: True)
    assert got == [[0.75, 1.0], [2.0, 2.0]]


def test_time_share_halves_the_worker_between_chats_and_embeddings() -> None:
    from llamacpp_integrations.engine.embedding_queue import TimeShare

    share = TimeShare()
    assert share.embedding_may_run(chatting=False)
    share.chat(0.05)
    assert share.embedding_may_run(chatting=True)
    share.embedded(1.0)  # one long embedding decode...
    runs = 0
    while not share.embedding_may_run(chatting=True):
        share.chat(0.05)  # ...is followed by chat steps worth as much time
        runs += 1
    assert runs == 19
    share.reset()
    assert share.embedding_may_run(chatting=True)
