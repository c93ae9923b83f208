"""``ChatLlamaCpp``'s token counts and ``model_name`` without loading the model.

LangChain counts synchronously (``get_num_tokens``, ``get_token_ids``, and
``get_num_tokens_from_messages``, which ``trim_messages`` calls inside async agents), so before
the engine is loaded the model's vocabulary counts (``client.counting``): read once, at once off
an event loop, on another thread on one; the weights are never loaded for a count. Vocabulary
reads and weight loads are replaced by recorders that note whether their thread ran a loop; the
vocabulary and the engine are both scripted engines, which count alike."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import trim_messages
from pydantic import BaseModel

from llamacpp_integrations.errors import InvalidRequestError, ModelLoadError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.testing import ScriptedEngine
from llamacpp_integrations.testing.scripted import CHATML
from tests.builders.loads import Loads, OpensGate, scripted_loads
from tests.unit.test_models import valid_gguf  # a tiny GGUF with no chat template

PROMPT = (
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHéllo 42<|im_end|>\n"
    "<|im_start|>assistant\n"
)


class Weather(BaseModel):
    """The weather in a city."""

    city: str


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(valid_gguf())
    return path


@dataclass
class CountLoads(Loads):
    """The vocabulary reads and weight loads; the vocabulary and the engine they give."""

    vocabulary: ScriptedEngine = field(default_factory=ScriptedEngine)
    engine: ScriptedEngine = field(default_factory=ScriptedEngine)


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> CountLoads:
    loads = CountLoads()
    scripted_loads(
        loads, monkeypatch, vocabulary=lambda spec: loads.vocabulary, engine=loads.engine
    )
    return loads


@pytest.fixture
def warnings(loads: CountLoads) -> Iterator[OpensGate]:
    handler = OpensGate(loads.gate)
    logger = logging.getLogger("llamacpp_integrations.langchain")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _chat(gguf: Path) -> ChatLlamaCpp:
    return ChatLlamaCpp(model=str(gguf), chat_template=CHATML)


MESSAGES = [SystemMessage("Be brief."), HumanMessage("Héllo 42")]


# -- before the engine is loaded -----------------------------------------------------------------


def test_counts_before_loading_come_from_the_vocabulary(gguf: Path, loads: CountLoads) -> None:
    llm = _chat(gguf)
    assert llm.get_token_ids("héllo 1") == [ord(c) for c in "héllo 1"]
    assert llm.get_num_tokens("héllo 1") == 7
    assert llm.get_num_tokens_from_messages(MESSAGES) == len(PROMPT)
    assert loads.done == [("vocabulary", False)]  # read once, here: no loop runs
    assert loads.vocabulary.tokenized == ["héllo 1", "héllo 1"]
    assert llm.binding.loaded() is None  # no weights for counting tokens


def test_tools_are_counted_as_the_template_renders_them(gguf: Path, loads: CountLoads) -> None:
    template = CHATML + "{%- for tool in tools or [] %}{{ tool.function.name }}{% endfor %}"
    llm = ChatLlamaCpp(model=str(gguf), chat_template=template)
    plain = llm.get_num_tokens_from_messages(MESSAGES)
    assert llm.get_num_tokens_from_messages(MESSAGES, tools=[Weather]) == plain + len("Weather")
    assert llm.binding.loaded() is None


def test_trim_messages_counts_with_the_vocabulary(gguf: Path, loads: CountLoads) -> None:
    history = [SystemMessage("Be brief."), HumanMessage("a" * 200), AIMessage("b" * 200)]
    history.append(HumanMessage("Héllo 42"))
    kept = trim_messages(
        history, max_tokens=120, token_counter=_chat(gguf), strategy="last", include_system=True
    )
    assert kept == MESSAGES
    assert [what for what, _ in loads.done] == ["vocabulary"]


async def test_counts_on_the_loop_read_the_vocabulary_on_another_thread(
    gguf: Path, loads: CountLoads, warnings: OpensGate
) -> None:
    llm = _chat(gguf)
    await asyncio.to_thread(llm.get_num_tokens, "")  # readied off the loop, as advised
    assert llm.get_num_tokens("on the loop") == 11
    assert llm.get_num_tokens_from_messages(MESSAGES) == len(PROMPT)
    assert loads.done == [("vocabulary", False)]
    assert warnings.messages == []  # the loop never waited
    assert llm.binding.loaded() is None


async def test_a_first_count_on_the_loop_waits_for_the_read_and_says_so(
    gguf: Path, loads: CountLoads, warnings: OpensGate
) -> None:
    loads.gate.clear()  # the read finishes once the warning is logged
    llm = _chat(gguf)
    assert llm.get_token_ids("ab") == [97, 98]
    assert loads.on_the_loop() == []  # the loop waited; it did not read the vocabulary
    assert warnings.messages == [
        f"the event loop waits for the vocabulary of {gguf}; count once before the loop "
        "starts (llm.get_num_tokens('')), or off it (asyncio.to_thread), to read it beforehand"
    ]
    assert llm.binding.loaded() is None


def test_a_missing_model_raises_its_load_error_when_counted() -> None:
    llm = ChatLlamaCpp(model="/nonexistent/model.gguf")
    with pytest.raises(ModelLoadError, match="not found"):
        llm.get_num_tokens("a")


# -- once loaded, or given -----------------------------------------------------------------------


async def test_once_loaded_the_engine_counts(gguf: Path, loads: CountLoads) -> None:
    llm = _chat(gguf)
    before = llm.get_num_tokens_from_messages(MESSAGES)
    await llm.ainvoke("Hi")  # loads the weights, on a thread
    assert llm.get_token_ids("xy") == [120, 121]
    assert loads.engine.tokenized == ["xy"]
    assert llm.get_num_tokens_from_messages(MESSAGES) == before  # the two count alike
    assert sorted(loads.done) == [("vocabulary", False), ("weights", False)]


def test_a_given_engine_counts_and_no_vocabulary_is_read(loads: CountLoads) -> None:
    engine = ScriptedEngine()
    llm = ChatLlamaCpp(engine=engine)
    assert llm.get_num_tokens("abc") == 3
    assert engine.tokenized == ["abc"]
    assert llm.get_num_tokens_from_messages([HumanMessage("hi")]) == len(
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert loads.done == []


async def test_images_are_counted_by_the_engine(
    gguf: Path, loads: CountLoads, warnings: OpensGate
) -> None:
    """Only the projector says what an image costs: counting one loads the engine."""
    llm = _chat(gguf)
    image = {"type": "image", "base64": "aGk=", "mime_type": "image/png"}
    with pytest.raises(InvalidRequestError):  # the scripted engine has no projector
        await asyncio.to_thread(
            llm.get_num_tokens_from_messages, [HumanMessage(content_blocks=[image])]
        )
    assert [what for what, _ in loads.done] == ["weights"]  # no vocabulary read for it
    assert loads.on_the_loop() == []
    assert warnings.messages == []  # counted off the loop: the load is not the loop's


# -- model_name ----------------------------------------------------------------------------------


def test_model_name_from_the_environment_needs_no_load(
    gguf: Path, loads: CountLoads, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMACPP_MODEL", str(gguf))
    llm = ChatLlamaCpp()
    assert llm.model_name == "tiny"  # the file's name, as the engine would report it
    assert loads.done == []


def test_model_name_of_a_model_not_fetched_is_its_spec(
    loads: CountLoads, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("LLAMACPP_MODEL", "hf://acme/tiny-GGUF:Q4_K_M")
    assert ChatLlamaCpp().model_name == "hf://acme/tiny-GGUF:Q4_K_M"
    assert loads.done == []


def test_model_name_of_a_loaded_engine_is_its_file(
    gguf: Path, loads: CountLoads, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMACPP_MODEL", str(gguf))
    llm = ChatLlamaCpp()
    llm.invoke("Hi")
    assert llm.model_name == "scripted"  # what the loaded engine reports


def test_model_name_without_any_model_says_how_to_name_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LLAMACPP_MODEL", raising=False)
    with pytest.raises(InvalidRequestError, match="LLAMACPP_MODEL"):
        _ = ChatLlamaCpp().model_name
