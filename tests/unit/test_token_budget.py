"""The shared length check: kept, cut to the head, or refused naming the input."""

from __future__ import annotations

import pytest

from llamacpp_integrations.errors import ContextOverflowError
from llamacpp_integrations.prompts.token_budget import fit_tokens

ARGS = {"subject": "text 2 has", "taker": "embeddings take", "hint": "pass truncate=True"}


def test_tokens_within_the_limit_are_kept() -> None:
    assert fit_tokens([1, 2, 3], 3, truncate=False, request_id="r", **ARGS) == [1, 2, 3]


def test_truncate_keeps_the_head() -> None:
    assert fit_tokens([1, 2, 3, 4], 2, truncate=True, request_id="r", **ARGS) == [1, 2]


def test_overflow_names_the_input_and_the_limit() -> None:
    with pytest.raises(ContextOverflowError) as caught:
        fit_tokens([1, 2, 3, 4], 2, truncate=False, request_id="r", **ARGS)
    message = str(caught.value)
    assert "text 2 has 4 tokens; embeddings take at most 2 (pass truncate=True)" in message
    assert caught.value.n_prompt_tokens == 4
    assert caught.value.n_ctx == 2
