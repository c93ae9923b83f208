"""The llama.cpp options people pass, on the real model: KV cache types, RoPE settings, LoRA
adapters, and a raw GBNF grammar per call through both frameworks.

What is asserted is what the integration guarantees (llama.cpp made the cache it was asked
for, an adapter changes the logits and a zero scale does not, output follows the grammar),
never what the tiny model knows.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from llama_index.core.llms import ChatMessage

from llamacpp_integrations.engine import CompletionRequest, EngineConfig, LoraAdapter
from llamacpp_integrations.engine.engine import Engine
from llamacpp_integrations.engine.worker.host import loaded_weights
from llamacpp_integrations.errors import InvalidRequestError, ModelLoadError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp
from tests.builders.tiny_lora import cached_tiny_lora

from .helpers import GREEDY, chat

YES_NO = 'root ::= ("yes" | "no") " because " [a-z ]{1,40} "."'
YES_NO_RE = re.compile(r"(yes|no) because [a-z ]{1,40}\.")


def small(smollm_path: Path, **settings: object) -> Engine:
    return Engine(
        EngineConfig(model=str(smollm_path), n_seq_max=1, n_ctx_per_seq=256, **settings)  # type: ignore[arg-type]
    )


def first_step(engine: Engine, prompt: str = "The capital of France is") -> tuple[list[int], float]:
    """Greedy tokens of a short completion, and the log-probability of the first."""
    completion = engine.generate(
        CompletionRequest(prompt=prompt, max_tokens=12, sampling=GREEDY, logprobs=1)
    )
    assert completion.logprobs is not None
    return list(completion.token_ids), completion.logprobs[0].logprob


# -- KV cache types ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_k", "type_v"), [("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "f16")]
)
def test_each_cache_type_loads_and_generates(
    smollm_path: Path, type_k: str, type_v: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="llamacpp_integrations.llama_cpp")
    with small(smollm_path, type_k=type_k, type_v=type_v) as engine:
        completion = engine.generate(chat("Name a colour.", max_tokens=8))
    assert completion.text.strip() and completion.usage.completion_tokens > 0
    # llama.cpp's own account of the cache it made names both types.
    cache_lines = [r.getMessage() for r in caplog.records if "llama_kv_cache" in r.getMessage()]
    assert any(f"K ({type_k})" in line and f"V ({type_v})" in line for line in cache_lines)


def test_a_quantized_v_cache_needs_flash_attention(smollm_path: Path) -> None:
    assert EngineConfig(type_v="q4_0").flash_attention_for(0) is True
    with pytest.raises(InvalidRequestError, match="flash attention"):
        small(smollm_path, type_v="q4_0", flash_attention=False)
    with pytest.raises(ValueError, match="flash attention"):  # the adapters say the same
        ChatLlamaCpp(model=str(smollm_path), type_v="q8_0", flash_attention=False)


# -- RoPE ----------------------------------------------------------------------------------------


def test_rope_settings_are_accepted_and_change_the_logits(smollm_path: Path) -> None:
    with small(smollm_path) as engine:
        base = first_step(engine, "One, two, three, four, five, six,")
    rope = {"rope_scaling_type": "linear", "rope_freq_scale": 0.5, "rope_freq_base": 50000.0}
    with small(smollm_path, **rope) as engine:
        scaled = first_step(engine, "One, two, three, four, five, six,")
    assert scaled[1] != pytest.approx(base[1], abs=1e-6)
    yarn = {"rope_scaling_type": "yarn", "yarn_orig_ctx": 8192, "yarn_ext_factor": 1.0}
    with small(smollm_path, **yarn) as engine:
        assert first_step(engine)[0]


# -- LoRA ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lora() -> Path:
    return cached_tiny_lora()


def test_a_lora_adapter_changes_the_logits_and_scale_zero_does_not(
    smollm_path: Path, lora: Path
) -> None:
    with small(smollm_path) as engine:
        base_tokens, base_logprob = first_step(engine)
    with small(smollm_path, lora_adapters=[LoraAdapter(str(lora), 1.0)]) as engine:
        tokens, logprob = first_step(engine)
    assert tokens != base_tokens or abs(logprob - base_logprob) > 1e-4
    with small(smollm_path, lora_adapters=[(str(lora), 0.0)]) as engine:
        zero_tokens, zero_logprob = first_step(engine)
    assert zero_tokens == base_tokens
    assert zero_logprob == pytest.approx(base_logprob, abs=1e-4)


def test_engines_with_and_without_an_adapter_share_the_weights(
    smollm_path: Path, lora: Path
) -> None:
    with small(smollm_path) as plain, small(smollm_path, lora_adapters=[str(lora)]) as adapted:
        assert plain.config.weights == adapted.config.weights
        assert loaded_weights().count(plain.config.weights) == 1
        assert first_step(plain) != first_step(adapted)


def test_adapters_reach_both_frameworks(smollm_path: Path, lora: Path) -> None:
    adapters = [LoraAdapter(str(lora), 1.0)]
    chat_model = ChatLlamaCpp(model=str(smollm_path), lora_adapters=adapters, max_tokens=2)
    llm = LlamaCpp(model=str(smollm_path), lora_adapters=adapters, max_tokens=2)
    assert chat_model.binding.get().config.lora_adapters == tuple(
        LoraAdapter(str(lora.resolve()), 1.0) for _ in adapters
    )
    assert llm.engine.config.lora_adapters == chat_model.binding.get().config.lora_adapters


def test_an_adapter_for_another_model_is_refused(gemma_path: Path, lora: Path) -> None:
    config = EngineConfig(model=str(gemma_path), n_seq_max=1, lora_adapters=[str(lora)])  # type: ignore[list-item]
    with pytest.raises(ModelLoadError, match="LoRA adapter"):
        Engine(config)


# -- a raw grammar per call ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_model(smollm_path: Path) -> Iterator[ChatLlamaCpp]:
    yield ChatLlamaCpp(model=str(smollm_path), temperature=0, max_tokens=64)


def test_langchain_grammar_per_call(chat_model: ChatLlamaCpp) -> None:
    answer = chat_model.invoke([HumanMessage("Is the sea salty?")], grammar=YES_NO)
    assert YES_NO_RE.fullmatch(str(answer.content))
    streamed = "".join(
        str(chunk.content) for chunk in chat_model.stream("Is ice cold?", grammar=YES_NO)
    )
    assert YES_NO_RE.fullmatch(streamed)
    free = chat_model.invoke("Is ice cold?")  # the grammar was for one call only
    assert not YES_NO_RE.fullmatch(str(free.content))


def test_llama_index_grammar_per_call(smollm_path: Path) -> None:
    llm = LlamaCpp(model=str(smollm_path), temperature=0.0, max_tokens=64)
    answer = llm.chat([ChatMessage(role="user", content="Is the sea salty?")], grammar=YES_NO)
    assert YES_NO_RE.fullmatch(answer.message.content or "")
    completed = llm.complete("Q: Is fire hot?\nA:", grammar=YES_NO)
    assert YES_NO_RE.fullmatch(completed.text)


def test_a_grammar_that_does_not_parse_is_an_invalid_request(chat_model: ChatLlamaCpp) -> None:
    with pytest.raises(InvalidRequestError, match="does not parse"):
        chat_model.invoke("Hi", grammar='root ::= "unclosed')
    with pytest.raises(InvalidRequestError, match="does not parse"):
        list(chat_model.stream("Hi", grammar="root ::= missing_rule"))


def test_a_grammar_beside_tools_or_structured_output_is_refused(
    chat_model: ChatLlamaCpp,
) -> None:
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    with pytest.raises(InvalidRequestError, match="grammar cannot be used together"):
        chat_model.bind_tools([add]).invoke("Add 2 and 3", grammar=YES_NO)
    with pytest.raises(InvalidRequestError, match="grammar cannot be used together"):
        chat_model.invoke("Hi", grammar=YES_NO, response_format={"type": "json_object"})
