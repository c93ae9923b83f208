"""Sequences decoded in one batch see only their own cells.

Batched kernels round differently from single-sequence ones, so greedy text may drift apart after
tens of tokens; exact equality is not expected. Instead each sequence's prompt plus a fixed
continuation is fed (teacher forcing) once in a batch of 8 and once alone, and the top-1 token at
every continuation position is compared. A deliberately cross-wired pairing is the control.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from llamacpp_integrations.engine import Engine
from llamacpp_integrations.engine.native.runner import GenerationContext
from llamacpp_integrations.engine.native.weights import LoadedModel

from .helpers import QUESTIONS, chat

N_SEQ = 8
N_CONTINUATION = 32


@pytest.fixture(scope="module")
def model(smollm_path: Path) -> Iterator[LoadedModel]:
    loaded = LoadedModel(smollm_path)
    yield loaded
    loaded.close()


def _decode_every_row(context: GenerationContext, sequences: list[tuple[int, list[int]]]) -> int:
    """One ``llama_decode`` of whole sequences from position 0, keeping every token's logits
    (teacher forcing; the engine itself keeps only the last row of each sequence)."""
    n_total = sum(len(tokens) for _, tokens in sequences)
    batch = llama_cpp.llama_batch_init(n_total, 0, 1)
    try:
        n = 0
        for seq_id, tokens in sequences:
            for pos, token in enumerate(tokens):
                batch.token[n], batch.pos[n], batch.n_seq_id[n] = token, pos, 1
                batch.seq_id[n][0] = seq_id
                batch.logits[n] = True
                n += 1
        batch.n_tokens = n
        return int(llama_cpp.llama_decode(context.handle, batch))
    finally:
        llama_cpp.llama_batch_free(batch)


def _top1(context: GenerationContext, rows: range) -> list[int]:
    return [int(np.argmax(context.logits_view(row))) for row in rows]


def _sequences(engine: Engine) -> list[tuple[list[int], list[int]]]:
    out = []
    for question in QUESTIONS[:N_SEQ]:
        request = chat(question, max_tokens=N_CONTINUATION, ignore_eos=True)
        prompt = engine.prompt_tokens(request)
        continuation = list(engine.generate(request).token_ids)
        out.append((prompt, continuation))
    return out


def test_batched_sequences_agree_with_solo_ones(engine: Engine, model: LoadedModel) -> None:
    sequences = _sequences(engine)
    n_total = sum(len(p) + len(c) for p, c in sequences)
    # The engine's own attention and KV layout settings, so the check covers what it runs.
    layout = {
        "flash_attention": engine.config.flash_attention_for(model.n_gpu_layers),
        "kv_unified": engine.context_choice.unified,
        "n_threads": engine.config.threads,
    }
    batched_ctx = GenerationContext(
        model, n_cells=512 * N_SEQ, n_seq_max=N_SEQ, n_batch=n_total, **layout
    )
    solo_ctx = GenerationContext(model, n_cells=512, n_seq_max=1, n_batch=512, **layout)
    try:
        entries = [(seq_id, [*p, *c]) for seq_id, (p, c) in enumerate(sequences)]
        assert _decode_every_row(batched_ctx, entries) == 0
        batched: list[list[int]] = []
        offset = 0
        for p, c in sequences:
            # Rows predicting continuation tokens: from the last prompt token on.
            start = offset + len(p) - 1
            batched.append(_top1(batched_ctx, range(start, start + len(c))))
            offset += len(p) + len(c)
        solo: list[list[int]] = []
        for p, c in sequences:
            solo_ctx.remove(0, 0)
            assert _decode_every_row(solo_ctx, [(0, [*p, *c])]) == 0
            solo.append(_top1(solo_ctx, range(len(p) - 1, len(p) - 1 + len(c))))
    finally:
        batched_ctx.close()
        solo_ctx.close()

    def agreement(a: list[int], b: list[int]) -> float:
        n = min(len(a), len(b))
        return sum(x == y for x, y in zip(a[:n], b[:n], strict=True)) / n

    own = [agreement(batched[i], solo[i]) for i in range(N_SEQ)]
    crossed = [agreement(batched[i], solo[(i + 1) % N_SEQ]) for i in range(N_SEQ)]
    print("own agreement", own, "crossed", crossed)
    assert min(own) >= 0.85, own
    assert max(crossed) < 0.5, crossed
    # The engine served those continuations greedily; solo top-1 reproduces them (up to rounding).
    for (_, continuation), predicted in zip(sequences, solo, strict=True):
        assert agreement(predicted, continuation) >= 0.85
