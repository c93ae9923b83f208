"""Embedding bookkeeping without llama.cpp: the queue's batches and the prefix table."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from llamacpp_integrations.client.embedding_prefixes import Prefixes, prefixes_for
from llamacpp_integrations.engine.channel import EventChannel
from llamacpp_integrations.engine.embedding.job import EmbedJob
from llamacpp_integrations.engine.embedding.packing import PendingTexts
from llamacpp_integrations.engine.embedding.queue import EmbeddingQueue, EmbedFn


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
    assert seen == [[10], [300]]
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


def _by_length(log: list[list[int]]) -> EmbedFn:
    """A fake decode whose vector for a text is its token count (and which logs the batch)."""

    def embed(lists: list[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        log.append([len(t) for t in lists])
        return [np.asarray([len(t)], dtype=np.float32) for t in lists]

    return embed


def test_packing_takes_the_longest_text_that_still_fits() -> None:
    pending = PendingTexts([5, 50, 30, 20, 45])
    assert pending.take(100, room=8) == [1, 4, 0]  # 50 + 45 + 5 fill the budget exactly
    assert pending.take(100, room=1) == [2]  # the sequence count binds before the tokens
    assert len(pending) == 1 and pending.shortest == 20
    assert pending.take(10, room=8) == []  # nothing fits
    assert pending.take_shortest() == 3 and len(pending) == 0


def test_vectors_come_back_in_the_order_of_the_texts() -> None:
    queue = EmbeddingQueue()
    lengths = [7, 40, 3, 25, 40, 12, 1, 33]
    job, channel = _job(lengths)
    queue.add([job])
    log: list[list[int]] = []
    while queue:
        queue.step(_by_length(log), max_tokens=50, max_texts=3)
    assert channel.get(lambda: True) == [[float(n)] for n in lengths]
    assert all(sum(batch) <= 50 and len(batch) <= 3 for batch in log)
    assert sorted(n for batch in log for n in batch) == sorted(lengths)
    assert log[0] == [40, 7, 3]  # longest first, the gap filled by the shorter ones


def test_the_oldest_job_packs_first_and_younger_ones_fill_the_rest() -> None:
    queue = EmbeddingQueue()
    big, big_channel = _job([30] * 4, "big")
    small, small_channel = _job([10, 20], "small")
    queue.add([big, small])
    log: list[list[int]] = []
    queue.step(_by_length(log), max_tokens=100, max_texts=8)
    # three of the big job's texts (90 tokens), then the small job's 10-token text in the gap
    assert log == [[30, 30, 30, 10]]
    queue.step(_by_length(log), max_tokens=100, max_texts=8)
    assert log[1] == [30, 20]
    assert big_channel.get(lambda: True) == [[30.0]] * 4
    assert small_channel.get(lambda: True) == [[10.0], [20.0]]
    assert not queue


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
    rows = {3: [1.0, 0.0], 1: [0.0, 4.0], 2: [2.0, 2.0]}  # by token count

    def embed(lists: list[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        return [np.asarray(rows[len(t)], dtype=np.float32) for t in lists]

    queue.step(embed, max_tokens=100, max_texts=8)
    got = channel.get(lambda: True)
    assert got == [[0.75, 1.0], [2.0, 2.0]]


def test_the_next_decode_is_the_budget_or_a_longer_text_alone() -> None:
    queue = EmbeddingQueue()
    old, _ = _job([300, 200], "old")
    young, _ = _job([40], "young")
    queue.add([old, young])
    assert queue.next_decode_tokens(64) == 64  # the young job's text fits
    assert queue.next_decode_tokens(30) == 200  # nothing fits: the oldest's shortest, alone

    def embed(lists: list[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        return [np.ones(2, dtype=np.float32) for _ in lists]

    assert queue.step(embed, max_tokens=64, max_texts=8) == 40
    assert queue.next_decode_tokens(64) == 200
    assert queue.step(embed, max_tokens=64, max_texts=8) == 200
