"""The log-probability computation on synthetic logits, and the validation of ``logprobs``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llamacpp_integrations.engine import CompletionRequest
from llamacpp_integrations.engine.worker.logprobs import LogprobComputer
from llamacpp_integrations.errors import InvalidRequestError


class FakeModel:
    """Just what ``LogprobComputer`` reads: the vocabulary size and each token's bytes."""

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self.lookups = 0

    def token_to_piece(self, token: int, *, special: bool = False) -> bytes:
        self.lookups += 1
        if token == 0:
            return b"<ctl>" if special else b""
        if token == 1:
            return b"\xe2\x82"  # the first two bytes of a three-byte character
        return f"t{token}".encode()


def computer(n_vocab: int) -> tuple[LogprobComputer, FakeModel]:
    model = FakeModel(n_vocab)
    return LogprobComputer(model), model


def reference(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    return np.asarray(x - (x.max() + np.log(np.exp(x - x.max()).sum())))


@pytest.mark.parametrize("scale", [1.0, 30.0, 1e4])
def test_matches_a_plain_log_softmax(scale: float) -> None:
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(5000) * scale).astype(np.float32)
    comp, _ = computer(len(logits))
    expected = reference(logits)
    for token in (0, 17, int(np.argmax(logits)), int(np.argmin(logits))):
        entry = comp.compute(logits, token, 5, special=False)
        assert entry.token_id == token
        assert entry.logprob == pytest.approx(expected[token], rel=1e-12, abs=1e-12)
        assert entry.logprob <= 0
        order = np.argsort(-expected, kind="stable")[:5]
        assert [alt.token_id for alt in entry.top] == [int(i) for i in order]
        assert [alt.logprob for alt in entry.top] == pytest.approx(expected[order].tolist())


def test_probabilities_sum_to_one() -> None:
    logits = np.linspace(-20, 20, 100, dtype=np.float32)
    comp, _ = computer(100)
    total = math.fsum(
        math.exp(comp.compute(logits, t, 0, special=False).logprob) for t in range(100)
    )
    assert total == pytest.approx(1.0, abs=1e-9)


def test_ties_are_ordered_by_token_id_and_the_row_is_not_written() -> None:
    logits = np.array([1.0, 3.0, 3.0, 2.0, 3.0, -np.inf], dtype=np.float32)
    before = logits.copy()
    comp, _ = computer(len(logits))
    entry = comp.compute(logits, 5, 4, special=False)
    assert [alt.token_id for alt in entry.top] == [1, 2, 4, 3]
    assert entry.top[0].logprob == entry.top[1].logprob == entry.top[2].logprob
    assert entry.logprob == -math.inf  # a masked token stays impossible
    np.testing.assert_array_equal(logits, before)


def test_asking_for_more_tokens_than_the_vocabulary_has() -> None:
    logits = np.array([0.5, 0.1, 0.9], dtype=np.float32)
    comp, _ = computer(3)
    assert [alt.token_id for alt in comp.compute(logits, 0, 20, special=False).top] == [2, 0, 1]


def test_token_text_bytes_and_the_special_flag() -> None:
    logits = np.zeros(4, dtype=np.float32)
    comp, model = computer(4)
    entry = comp.compute(logits, 1, 4, special=False)
    assert entry.token == "\ufffd" and entry.bytes == (0xE2, 0x82)
    top = {alt.token_id: alt for alt in entry.top}
    assert top[0].token == "" and top[0].bytes == ()
    assert top[3].token == "t3" and top[3].bytes == tuple(b"t3")
    assert comp.compute(logits, 0, 0, special=True).token == "<ctl>"
    lookups = model.lookups
    comp.compute(logits, 2, 4, special=False)
    assert model.lookups == lookups  # every text was already looked up once


@pytest.mark.parametrize("value", [-1, 21, 2.0, True, "1"])
def test_out_of_range_values_are_refused(value: object) -> None:
    request = CompletionRequest(prompt="x", logprobs=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="logprobs must be None or an integer"):
        request.validate_common(100)


@pytest.mark.parametrize("value", [None, 0, 1, 20])
def test_accepted_values(value: int | None) -> None:
    CompletionRequest(prompt="x", logprobs=value).validate_common(100)
