"""LoRA adapters chosen per request, on the real model with tiny random adapters: requests with
different adapters share one engine and its steps, each answered as if alone on an engine
with only its adapter applied; cells made under one adapter never serve another; adapters load
while serving without the weights being mapped again; an unknown name is a typed error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from llamacpp_integrations.engine import CompletionRequest, EngineConfig, LoraAdapter
from llamacpp_integrations.engine.engine import Engine
from llamacpp_integrations.engine.worker.host import loaded_weights
from llamacpp_integrations.errors import UnknownAdapterError
from tests.builders.tiny_lora import cached_tiny_lora

from .helpers import GREEDY

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def adapters() -> tuple[Path, Path]:
    return cached_tiny_lora(), cached_tiny_lora(seed=1)


def engine(smollm_path: Path, *adapters: LoraAdapter, deterministic: bool = True) -> Engine:
    return Engine(
        EngineConfig(
            model=str(smollm_path),
            n_seq_max=4,
            n_ctx_per_seq=256,
            deterministic=deterministic,
            lora_adapters=adapters,
        )
    )


def request(
    lora: Mapping[str | int, float] | None = None, prompt: str = PROMPT
) -> CompletionRequest:
    return CompletionRequest(prompt=prompt, max_tokens=10, sampling=GREEDY, lora=lora)


def mappings(path: Path) -> int:
    """How many regions of this process's memory map the file."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        return sum(line.rstrip().endswith(str(path.resolve())) for line in maps)


def test_a_request_gets_its_adapters_tokens_in_a_crowd_of_other_adapters(
    smollm_path: Path, adapters: tuple[Path, Path]
) -> None:
    a, b = adapters
    with engine(smollm_path, LoraAdapter(str(a))) as only_a:
        alone = only_a.generate(request()).token_ids
    with engine(smollm_path) as plain:
        base = plain.generate(request()).token_ids
    both = (LoraAdapter(str(a), 0.0, "a"), LoraAdapter(str(b), 0.0, "b"))
    with engine(smollm_path, *both) as served:
        # The same prompt four times: no request may take cells another adapter made.
        choices: list[Mapping[str | int, float] | None] = [{"b": 1.0}, None, {"a": 0.5}, {"a": 1}]
        handles = [served.submit(request(lora)) for lora in choices]
        answers = [handle.result().token_ids for handle in handles]
        again = served.generate(request({"a": 1.0})).token_ids  # after the others' cells
        by_id = served.generate(request({0: 1.0})).token_ids
    assert answers[3] == alone and again == alone and by_id == alone
    assert answers[1] == base  # no adapter named, and both default to scale 0
    assert alone != base


def test_mixed_adapters_share_the_steps_of_a_batched_engine(
    smollm_path: Path, adapters: tuple[Path, Path]
) -> None:
    a, b = adapters
    both = (LoraAdapter(str(a), 0.0, "a"), LoraAdapter(str(b), 0.0, "b"))
    with engine(smollm_path, *both, deterministic=False) as served:
        choices: list[Mapping[str | int, float] | None] = [{"a": 1.0}, {"b": 1.0}, None, {}]
        handles = [
            served.submit(replace(request(lora, f"{PROMPT} {i}"), ignore_eos=True))
            for i, lora in enumerate(choices)
        ]
        answers = [handle.result() for handle in handles]
        steps = served.stats().steps
    assert all(answer.usage.completion_tokens == 10 for answer in answers)
    assert steps >= 10  # every request decoded, a decode per adapter set and step


def test_adapters_load_while_serving_without_mapping_the_weights_again(
    smollm_path: Path, adapters: tuple[Path, Path]
) -> None:
    a, b = adapters
    with engine(smollm_path, LoraAdapter(str(a))) as only_a:
        alone = only_a.generate(request()).token_ids
    with engine(smollm_path) as served:
        before = mappings(smollm_path)
        base = served.generate(request()).token_ids
        info = served.load_lora("sql", str(a))
        served.load_lora("chat", str(b), scale=0.0)
        assert (info.id, info.name, info.scale) == (0, "sql", 0.0)
        assert [x.name for x in served.lora_adapters] == ["sql", "chat"]
        assert served.generate(request()).token_ids == base  # defaults: scale 0
        assert served.generate(request({"sql": 1.0})).token_ids == alone
        served.set_lora_scales({"sql": 1.0})
        assert served.generate(request()).token_ids == alone
        assert mappings(smollm_path) == before
        assert loaded_weights().count(served.config.weights) == 1


def test_an_unknown_adapter_is_a_typed_error_and_nothing_runs(
    smollm_path: Path, adapters: tuple[Path, Path]
) -> None:
    with engine(smollm_path, LoraAdapter(str(adapters[0]), name="sql")) as served:
        with pytest.raises(UnknownAdapterError, match="no LoRA adapter 'chat'") as caught:
            served.generate(request({"chat": 1.0}))
        assert caught.value.known == ("sql",)
        with pytest.raises(UnknownAdapterError):
            served.set_lora_scales({3: 1.0})
        with pytest.raises(UnknownAdapterError):
            served.generate(request({7: 1.0}))
        assert served.stats().running == 0
        assert served.generate(request({"sql": 1.0})).usage.completion_tokens == 10
