"""The embedding side of the worker without llama.cpp: decode sizes, the time share, and the
embedding context's life."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from llamacpp_integrations.engine.channel import EventChannel
from llamacpp_integrations.engine.embedding.job import EmbedJob
from llamacpp_integrations.engine.embedding.work import (
    EMBED_TOKENS_ON_CPU,
    EMBED_TOKENS_WHILE_CHATTING,
    EmbeddingWork,
    TimeShare,
    embed_budget,
)
from llamacpp_integrations.errors import EngineClosedError, RequestCancelledError


class FakeEmbedder:
    """Records each decode's text lengths; every vector is ones."""

    n_seq_max = 4

    def __init__(self) -> None:
        self.decodes: list[list[int]] = []
        self.closed = False

    def embed(self, token_lists: Sequence[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        self.decodes.append([len(tokens) for tokens in token_lists])
        return [np.ones(2, dtype=np.float32) for _ in token_lists]

    def close(self) -> None:
        self.closed = True


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


def _work(made: list[FakeEmbedder], *, on_cpu: bool = True) -> EmbeddingWork:
    def make() -> FakeEmbedder:
        made.append(FakeEmbedder())
        return made[-1]

    return EmbeddingWork(make, n_ctx=2048, n_batch=512, on_cpu=on_cpu)


def test_a_decode_holds_a_micro_batch_less_on_the_cpu_and_less_again_while_chatting() -> None:
    assert embed_budget(n_ctx=2048, n_batch=512, on_cpu=False, chatting=False) == 512
    assert embed_budget(n_ctx=300, n_batch=512, on_cpu=False, chatting=False) == 300
    cpu = embed_budget(n_ctx=2048, n_batch=512, on_cpu=True, chatting=False)
    assert cpu == EMBED_TOKENS_ON_CPU
    assert embed_budget(n_ctx=2048, n_batch=128, on_cpu=True, chatting=False) == 128
    chatting = embed_budget(n_ctx=2048, n_batch=512, on_cpu=False, chatting=True)
    assert chatting == EMBED_TOKENS_WHILE_CHATTING


def test_the_context_is_made_on_the_first_decode_and_freed_on_close() -> None:
    made: list[FakeEmbedder] = []
    work = _work(made)
    assert not work
    work.step(chatting=False)  # nothing to embed: no context
    assert made == []
    job, channel = _job([100, 100, 100])
    work.add([job])
    work.step(chatting=False)  # 256 tokens on the CPU: two texts, then the third
    work.step(chatting=False)
    assert len(made) == 1 and made[0].decodes == [[100, 100], [100]]
    assert not work and len(channel.get(lambda: True)) == 3  # type: ignore[arg-type]
    waiting, waiting_channel = _job([5], "waiting")
    work.add([waiting])
    work.close(lambda: EngineClosedError("closed"))
    assert made[0].closed
    error = waiting_channel.get(lambda: True)
    assert isinstance(error, EngineClosedError) and error.request_id == "waiting"


def test_while_chats_run_decodes_are_small_and_take_turns_with_the_chats() -> None:
    made: list[FakeEmbedder] = []
    work = _work(made)
    job, _ = _job([30] * 6)
    work.add([job])
    work.step(chatting=True)  # no chat time yet, nothing measured: a first small decode runs
    assert made[0].decodes == [[30, 30]]  # 64 tokens while chatting
    work.step(chatting=True)  # the decode's time is now owed to the chats
    assert made[0].decodes == [[30, 30]]
    work.chat_stepped(3600.0)
    work.step(chatting=True)
    assert made[0].decodes == [[30, 30], [30, 30]]


def test_a_cancelled_job_leaves_the_others() -> None:
    made: list[FakeEmbedder] = []
    work = _work(made)
    a, a_channel = _job([5], "a")
    b, b_channel = _job([5], "b")
    work.add([a, b])
    assert work.cancel("a", RequestCancelledError("cancelled"))
    assert not work.cancel("missing", RequestCancelledError("cancelled"))
    work.step(chatting=False)
    assert isinstance(a_channel.get(lambda: True), RequestCancelledError)
    assert b_channel.get(lambda: True) == [[1.0, 1.0]]


def test_time_share_gives_embeddings_a_third_of_the_worker_while_chats_run() -> None:
    share = TimeShare()
    assert share.embedding_may_run(chatting=False)
    share.chat(0.05)
    assert share.embedding_may_run(chatting=True)
    share.embedded(1.0)  # one long embedding decode...
    runs = 0
    while not share.embedding_may_run(chatting=True):
        share.chat(0.05)  # ...is followed by chat steps worth twice as much time
        runs += 1
    assert runs == 39
    share.reset()
    assert share.embedding_may_run(chatting=True)


def test_time_share_takes_the_share_asked_for() -> None:
    share = TimeShare(embedding_share=0.5)
    share.chat(0.05)
    share.embedded(1.0)
    runs = 0
    while not share.embedding_may_run(chatting=True):
        share.chat(0.05)
        runs += 1
    assert runs == 19
    with pytest.raises(ValueError):
        TimeShare(embedding_share=1.0)


def test_time_share_counts_a_decode_before_it_runs() -> None:
    share = TimeShare()
    share.embedded(0.5, tokens=100)  # idle: 5 ms per token, no chat yet
    share.reset()
    share.chat(0.05)  # a chat's first step
    # A long text alone (400 tokens, about 2 s) waits until the chat has had twice that...
    assert not share.embedding_may_run(chatting=True, tokens=400)
    # ...while a small decode (64 tokens, 0.32 s) may go once the chat has had 0.64 s.
    assert not share.embedding_may_run(chatting=True, tokens=64)
    share.chat(0.6)
    assert share.embedding_may_run(chatting=True, tokens=64)
    assert not share.embedding_may_run(chatting=True, tokens=400)
    share.chat(3.4)
    assert share.embedding_may_run(chatting=True, tokens=400)
    assert share.embedding_may_run(chatting=False, tokens=10_000)
