"""The prompt cache on disk with the real model: a long prompt saved by one engine is restored
by a fresh one (a restart) instead of evaluated, with the same greedy answer; damaged files and
files of another cache layout are ignored; two engines can share the directory."""

from __future__ import annotations

from pathlib import Path

from llamacpp_integrations.engine import ChatMessage, ChatRequest, Engine, EngineConfig

from .helpers import GREEDY, agree_up_to_a_tie, idle_and_freed, repeat_kept_all, wait_for

TIE_NATS = 0.35

SYSTEM = " ".join(
    f"Rule {i}: answer politely, cite the handbook section {i}, and keep it brief."
    for i in range(40)
)


def _request(question: str) -> ChatRequest:
    # Log-probabilities tell a near-tie apart: the restored prompt's last token is evaluated
    # alone, not in a chunk, and batched kernels round differently.
    return ChatRequest(
        logprobs=3,
        messages=[
            ChatMessage(role="system", content=SYSTEM),
            ChatMessage(role="user", content=question),
        ],
        max_tokens=12,
        sampling=GREEDY,
    )


def _engine(smollm_path: Path, directory: Path, **kwargs: object) -> Engine:
    return Engine(
        EngineConfig(
            model=str(smollm_path),
            n_seq_max=2,
            n_ctx_per_seq=2048,
            prompt_cache_dir=str(directory),
            prompt_cache_min_tokens=128,
            speculative=None,
            **kwargs,  # type: ignore[arg-type]
        )
    )


def test_a_restarted_engine_restores_the_prompt_instead_of_evaluating_it(
    smollm_path: Path, tmp_path: Path
) -> None:
    with _engine(smollm_path, tmp_path) as engine:
        cold = engine.generate(_request("What is rule 3?"))
    assert cold.usage.cached_prompt_tokens == 0
    assert len(list(tmp_path.glob("*.kvstate"))) == 1
    with _engine(smollm_path, tmp_path) as engine:
        same = engine.generate(_request("What is rule 3?"))
        other = engine.generate(_request("Who wrote the handbook?"))
        assert idle_and_freed(wait_for(engine, idle_and_freed))
    # The whole prompt but its last chunk (the question and the assistant's header, read with
    # the last token) came from disk, and the answer is the same.
    assert repeat_kept_all(same)
    agree_up_to_a_tie(cold, same, TIE_NATS)
    # Another question after the same system prompt restores the shared prefix.
    assert other.usage.cached_prompt_tokens > 300


def test_damaged_and_foreign_files_are_ignored_and_deleted(
    smollm_path: Path, tmp_path: Path
) -> None:
    with _engine(smollm_path, tmp_path) as engine:
        cold = engine.generate(_request("What is rule 5?"))
    (path,) = tmp_path.glob("*.kvstate")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])  # truncated
    with _engine(smollm_path, tmp_path) as engine:
        again = engine.generate(_request("What is rule 5?"))
    assert again.usage.cached_prompt_tokens == 0
    agree_up_to_a_tie(cold, again, TIE_NATS)
    # The damaged file was replaced by a good one: a third engine restores it.
    with _engine(smollm_path, tmp_path) as engine:
        third = engine.generate(_request("What is rule 5?"))
    assert third.usage.cached_prompt_tokens > 0
    agree_up_to_a_tie(cold, third, TIE_NATS)
    # Another cache layout (a q8_0 K cache) has another identity: it neither reads nor
    # deletes the f16 files, and its own answer is evaluated.
    with _engine(smollm_path, tmp_path, type_k="q8_0") as engine:
        foreign = engine.generate(_request("What is rule 5?"))
    assert foreign.usage.cached_prompt_tokens == 0
    assert len(list(tmp_path.glob("*.kvstate"))) == 2


def test_two_engines_share_one_directory(smollm_path: Path, tmp_path: Path) -> None:
    with _engine(smollm_path, tmp_path) as a, _engine(smollm_path, tmp_path) as b:
        first = a.generate(_request("What is rule 7?"))
        second = b.generate(_request("What is rule 7?"))  # b restores what a saved
        handles = [e.submit(_request(f"What is rule {i}?")) for i in (8, 9) for e in (a, b)]
        for handle in handles:
            handle.result()
    assert second.usage.cached_prompt_tokens > 0
    agree_up_to_a_tie(first, second, TIE_NATS)
    assert not list(tmp_path.glob(".tmp-*"))
