"""The greedy shortcut of ``SamplerChain`` on made-up logits rows (no decode), a step's greedy
rows picked at once on real ones, and the no-op decode seam of the overhead benchmark.

Greedy with nothing that changes the logits builds no llama.cpp chain and keeps the first of
equal maxima, as llama.cpp's greedy sampler does; the row is read in place, never copied.
``tests/integration/test_sampling_paths.py`` checks it against the chain on real models.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import numpy.typing as npt
import pytest

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.engine.batch import BatchEntry
from llamacpp_integrations.engine.native.fixed_logits import FixedLogitsContext, fixed_logits
from llamacpp_integrations.engine.native.runner import GenerationContext
from llamacpp_integrations.engine.native.sampler import SamplerChain
from llamacpp_integrations.engine.native.weights import LoadedModel
from llamacpp_integrations.engine.worker import cells


class Rows:
    """A context whose logits rows are given arrays (what ``logits_view`` answers)."""

    def __init__(self, *rows: npt.NDArray[np.float32]) -> None:
        self.rows = rows
        self.read: list[int] = []

    def logits_view(self, index: int) -> npt.NDArray[np.float32]:
        self.read.append(index)
        return self.rows[index]


def _sampler(params: SamplingParams, n_vocab: int = 8) -> SamplerChain:
    return SamplerChain(SimpleNamespace(n_vocab=n_vocab), params)  # type: ignore[arg-type]


def test_greedy_picks_the_first_of_equal_maxima() -> None:
    row = np.array([0.5, 2.0, -1.0, 2.0, 2.0, 0.0, 1.0, 1.5], dtype=np.float32)
    sampler = _sampler(SamplingParams(temperature=0.0))
    context = Rows(row, row[::-1].copy())
    assert sampler.sample(context, 0) == 1  # type: ignore[arg-type]
    assert sampler.sample(context, 1) == 3  # type: ignore[arg-type]
    assert context.read == [0, 1]
    sampler.close()


def test_greedy_reads_the_row_without_a_chain() -> None:
    row = fixed_logits(49152)
    sampler = _sampler(SamplingParams(temperature=0.0), n_vocab=len(row))
    assert sampler.sample(Rows(row), 0) == int(np.argmax(row))  # type: ignore[arg-type]
    assert not row.flags.writeable  # read in place: a copy would not need the row writable
    assert sampler.force(3)  # a forced token needs no chain either
    sampler.close()


def test_penalties_and_bias_keep_the_chain() -> None:
    """Greedy with a penalty or a bias runs llama.cpp's chain: it reads llama.cpp's own logits
    buffer, not ``logits_view`` (a made-up row would not be seen)."""
    for params in (
        SamplingParams(temperature=0.0, repeat_penalty=1.1),
        SamplingParams(temperature=0.0, logit_bias={1: -5.0}),
    ):
        sampler = _sampler(params)
        assert sampler._chain is not None
        sampler.close()
    plain = _sampler(SamplingParams(temperature=0.0, repeat_penalty=1.1, penalty_last_n=0))
    assert plain._chain is None  # penalties over no tokens change nothing
    plain.close()


def test_the_no_op_decode_seam_runs_the_whole_engine(
    smollm_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``FixedLogitsContext`` in place of the generation context (what
    ``benchmarks/bench_overhead.py`` does): every stream gets the fixed row's argmax, token
    after token, and no ``llama_decode`` runs."""
    monkeypatch.setattr(cells, "GenerationContext", FixedLogitsContext)
    config = EngineConfig(model=str(smollm_path), n_seq_max=4, n_ctx_per_seq=256)
    with Engine(config) as engine:
        requests = [
            ChatRequest(
                messages=[ChatMessage(role="user", content=f"Hi {i}")],
                sampling=SamplingParams(temperature=0.0),
                max_tokens=12,
                ignore_eos=True,
            )
            for i in range(4)
        ]
        handles = [engine.submit(request) for request in requests]
        answers = [handle.result() for handle in handles]
        expected = int(np.argmax(fixed_logits(engine.info.n_vocab)))
    assert all(answer.token_ids == (expected,) * 12 for answer in answers)


def test_a_steps_greedy_rows_picked_at_once_are_each_rows_argmax(smollm_path: Path) -> None:
    """``argmax_rows`` (one numpy pass over llama.cpp's logits table) against each row read on
    its own, on a batch like a busy step's: a prompt chunk without logits, a prompt's last
    chunk, decoding rows, and a speculating row that keeps every token's logits."""
    model = LoadedModel(smollm_path)
    context = GenerationContext(
        model,
        n_cells=4 * 256,
        n_seq_max=4,
        n_batch=64,
        n_threads=2,
        flash_attention=None,
        kv_unified=False,
    )
    try:
        # Sequence ids out of order: llama.cpp splits a batch by sequence (a KV stream each),
        # computes the rows in its own order, and puts them back in the batch's
        entries = [
            BatchEntry(3, [1, 2, 3, 4, 5, 6], 0, logits_last=False),
            BatchEntry(1, [7, 8, 9, 10], 0, logits_last=True),
            BatchEntry(0, [11], 0, logits_last=True),
            BatchEntry(2, [12, 13, 14], 0, logits_last=True, logits_all=True),
        ]
        assert context.decode(entries) == 0
        rows = [9, 10, 11, 12, 13]  # what keeps logits, in the batch's order
        each = [int(np.argmax(context.logits_view(row))) for row in rows]
        assert context.argmax_rows(rows) == each
        assert context.argmax_rows([rows[3], rows[1]]) == [each[3], each[1]]  # some, any order
        assert entries[1].logits_index == 9 and entries[2].logits_index == 10
        # A decoding step: one token each, the sequences in another order again.
        step = [BatchEntry(seq, [20 + seq], pos, logits_last=True) for seq, pos in
                ((2, 3), (0, 1), (3, 6), (1, 4))]  # fmt: skip
        assert context.decode(step) == 0
        each = [int(np.argmax(context.logits_view(row))) for row in range(4)]
        assert context.argmax_rows([0, 1, 2, 3]) == each
    finally:
        context.close()
        model.close()
