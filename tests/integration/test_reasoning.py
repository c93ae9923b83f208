"""Reasoning models on the real engine: SmolLM2 behind templates in each reasoning family's style.

No reasoning model can be fetched here, so SmolLM2-135M plays one: behind a QwQ-style template
(the prompt opens ``<think>``) whatever it writes first is thinking, and a reasoning budget makes
the engine close it; a grammar steers raw completions into the Qwen3 and gpt-oss formats. What
is asserted is what the integration guarantees: the thinking is split from the answer (whole
and streamed, in order, the same both ways), counted in tokens, cut by the budget, kept out of
the answer's text, and a structured answer or a tool call after it is still valid.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.tools import tool
from llama_index.core.base.llms.types import ChatMessage as LIChatMessage
from llama_index.core.base.llms.types import TextBlock, ThinkingBlock
from pydantic import BaseModel

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    Engine,
    EngineConfig,
    ReasoningSpec,
)
from llamacpp_integrations.errors import InvalidRequestError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp
from llamacpp_integrations.prompts.reasoning import ReasoningFormat, forced_end
from llamacpp_integrations.tools import constrain
from tests.builders.reasoning_templates import (
    GPT_OSS,
    GPT_OSS_FORMAT,
    QWEN3,
    QWEN3_FORMAT,
    QWQ,
    R1_FORMAT,
)

from .helpers import GREEDY

BUDGET = 10
MARKERS = ("<think>", "</think>", "<|channel|>", "<|message|>", "<|end|>")


@pytest.fixture(scope="module")
def qwq_engine(smollm_path: Path) -> Iterator[Engine]:
    """SmolLM2 with a QwQ-style template: every answer starts inside its thinking."""
    config = EngineConfig(
        model=str(smollm_path), n_seq_max=4, n_ctx_per_seq=1024, chat_template=QWQ
    )
    with Engine(config) as engine:
        yield engine


def _no_markers(*texts: str) -> None:
    for text in texts:
        assert not any(marker in text for marker in MARKERS), text


def _stream(engine: Engine, request: CompletionRequest | ChatRequest) -> tuple[str, str, list[str]]:
    """The streamed (reasoning, text) and the kinds of the pieces in order."""
    reasoning, text, kinds = "", "", []
    for chunk in engine.submit(request):
        reasoning += chunk.reasoning
        text += chunk.text
        kinds += ["reasoning"] * bool(chunk.reasoning) + ["text"] * bool(chunk.text)
    return reasoning, text, kinds


def _reasoning_then_text(kinds: list[str]) -> None:
    """Thinking pieces all come before the first answer piece."""
    assert "reasoning" in kinds and "text" in kinds
    assert "reasoning" not in kinds[kinds.index("text") :]


# -- the engine ----------------------------------------------------------------------------------

QWEN3_STEERED = 'root ::= "<think>" [a-z ]{8,40} "</think>" [A-Za-z ]{4,30}'
HARMONY_STEERED = (
    'root ::= "<|channel|>analysis<|message|>" [a-z ]{8,40} '
    '"<|end|><|start|>assistant<|channel|>final<|message|>" [A-Za-z ]{4,30}'
)


@pytest.mark.parametrize(
    ("spec", "grammar"),
    [
        (ReasoningSpec(QWEN3_FORMAT), QWEN3_STEERED),
        (ReasoningSpec(GPT_OSS_FORMAT), HARMONY_STEERED),
    ],
    ids=["qwen3", "gpt-oss"],
)
def test_engine_splits_output_whole_and_streamed(
    engine: Engine, spec: ReasoningSpec, grammar: str
) -> None:
    request = CompletionRequest(
        prompt="Question: what colour is the sky?\n",
        sampling=GREEDY,
        max_tokens=120,
        grammar=grammar,
        reasoning=spec,
    )
    whole = engine.submit(request).result()
    assert whole.reasoning.strip() and whole.text.strip()
    _no_markers(whole.reasoning, whole.text)
    reasoning, text, kinds = _stream(engine, request)
    assert (reasoning, text) == (whole.reasoning, whole.text)
    _reasoning_then_text(kinds)
    # The reasoning tokens are the first ones, up to the one that completed the end marker.
    end = spec.format.end
    n = whole.usage.reasoning_tokens
    assert 0 < n < whole.usage.completion_tokens
    assert end in engine.detokenize(whole.token_ids[:n])
    assert end not in engine.detokenize(whole.token_ids[: n - 1])


def test_output_of_a_request_without_reasoning_is_not_split(engine: Engine) -> None:
    request = CompletionRequest(
        prompt="Question: what colour is the sky?\n",
        sampling=GREEDY,
        max_tokens=60,
        grammar=QWEN3_STEERED,
    )
    completion = engine.submit(request).result()
    assert completion.text.startswith("<think>") and completion.reasoning == ""
    assert completion.usage.reasoning_tokens == 0


def test_budget_makes_the_engine_end_the_thinking(qwq_engine: Engine) -> None:
    spec = ReasoningSpec(R1_FORMAT, budget=BUDGET)
    request = ChatRequest(
        messages=[ChatMessage(role="user", content="Tell me about the sea.")],
        sampling=GREEDY,
        max_tokens=60,
        reasoning=spec,
    )
    completion = qwq_engine.submit(request).result()
    forced = qwq_engine.tokenize(forced_end(R1_FORMAT), add_special=False, parse_special=True)
    # The model thinks for the budget, then the engine writes the end marker itself.
    assert completion.token_ids[BUDGET : BUDGET + len(forced)] == tuple(forced)
    assert completion.reasoning.strip()
    _no_markers(completion.reasoning, completion.text)
    assert BUDGET < completion.usage.reasoning_tokens <= BUDGET + len(forced)
    # Without a budget the same model thinks on past it.
    free = qwq_engine.submit(
        ChatRequest(
            messages=request.messages,
            sampling=GREEDY,
            max_tokens=60,
            reasoning=ReasoningSpec(R1_FORMAT),
        )
    ).result()
    assert free.token_ids[:BUDGET] == completion.token_ids[:BUDGET]
    assert free.usage.reasoning_tokens > completion.usage.reasoning_tokens


def test_a_budget_that_does_not_fit_is_refused_and_the_engine_serves_on(
    qwq_engine: Engine,
) -> None:
    bad = ChatRequest(
        messages=[ChatMessage(role="user", content="Hi")],
        reasoning=ReasoningSpec(R1_FORMAT, budget=-1),
    )
    with pytest.raises(InvalidRequestError, match="budget"):
        qwq_engine.submit(bad)
    good = ChatRequest(
        messages=[ChatMessage(role="user", content="Hi")], sampling=GREEDY, max_tokens=4
    )
    assert qwq_engine.submit(good).result().usage.completion_tokens > 0
    assert qwq_engine.stats().running == 0


FAMILIES = [(QWEN3, QWEN3_FORMAT), (QWQ, R1_FORMAT), (GPT_OSS, GPT_OSS_FORMAT)]
FAMILY_IDS = ["qwen3", "r1", "gpt-oss"]


@pytest.mark.parametrize(("template", "format"), FAMILIES, ids=FAMILY_IDS)
def test_engine_structured_answer_after_thinking_in_each_family(
    engine: Engine, template: str, format: ReasoningFormat
) -> None:
    schema = Person.model_json_schema()
    request = constrain(
        ChatRequest(
            messages=[ChatMessage(role="user", content="Ada is 36.")],
            chat_template=template,
            sampling=GREEDY,
            max_tokens=120,
            reasoning=ReasoningSpec(format, budget=BUDGET),
        ),
        schema,
    )
    completion = engine.submit(request).result()
    assert completion.finish_reason == "stop"
    Person.model_validate(json.loads(completion.text))
    _no_markers(completion.reasoning)


def test_switching_thinking_off_renders_the_templates_off_prompt(engine: Engine) -> None:
    messages = [ChatMessage(role="user", content="Hi")]
    off = ChatRequest(
        messages=messages, chat_template=QWEN3, reasoning=ReasoningSpec(QWEN3_FORMAT, enabled=False)
    )
    default = ChatRequest(
        messages=messages, chat_template=QWEN3, reasoning=ReasoningSpec(QWEN3_FORMAT)
    )
    assert engine.render_chat(off).endswith("<think>\n\n</think>\n\n")
    assert engine.render_chat(default).endswith("<|im_start|>assistant\n")


# -- LangChain -----------------------------------------------------------------------------------


class Person(BaseModel):
    name: str
    age: int


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@pytest.fixture
def reasoner(qwq_engine: Engine) -> ChatLlamaCpp:
    return ChatLlamaCpp(engine=qwq_engine, temperature=0, max_tokens=80, reasoning_budget=BUDGET)


def _reasoning_of(message: AIMessage) -> str:
    reasoning = message.additional_kwargs.get("reasoning_content", "")
    assert isinstance(reasoning, str)
    return reasoning


def test_langchain_keeps_thinking_out_of_the_content(reasoner: ChatLlamaCpp) -> None:
    message = reasoner.invoke("Tell me about the sea.")
    reasoning = _reasoning_of(message)
    assert reasoning.strip()
    assert isinstance(message.content, str)
    _no_markers(reasoning, message.content)
    assert message.content_blocks[0] == {"type": "reasoning", "reasoning": reasoning}
    usage = message.usage_metadata
    assert usage is not None
    n = usage.get("output_token_details", {}).get("reasoning", 0)
    assert BUDGET < n < usage["output_tokens"]


def test_langchain_streams_the_thinking_first(reasoner: ChatLlamaCpp) -> None:
    whole = reasoner.invoke("Tell me about the sea.")
    chunks = list(reasoner.stream("Tell me about the sea."))
    kinds = []
    for chunk in chunks:
        kinds += ["reasoning"] * bool(chunk.additional_kwargs.get("reasoning_content"))
        kinds += ["text"] * bool(chunk.content)
    _reasoning_then_text(kinds)
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert isinstance(merged, AIMessageChunk)
    assert merged.content == whole.content
    assert _reasoning_of(merged) == _reasoning_of(whole)
    assert merged.usage_metadata == whole.usage_metadata


def test_langchain_structured_answer_after_thinking(reasoner: ChatLlamaCpp) -> None:
    out = reasoner.with_structured_output(Person, include_raw=True).invoke("Ada is 36.")
    assert out["parsing_error"] is None
    assert isinstance(out["parsed"], Person)
    raw = out["raw"]
    assert _reasoning_of(raw).strip()
    # The JSON starts where the reasoning ends: the content is the document alone.
    assert Person.model_validate(json.loads(raw.content)) == out["parsed"]


@pytest.mark.parametrize("choice", ["any", "multiply"])
def test_langchain_tool_call_after_thinking(reasoner: ChatLlamaCpp, choice: str) -> None:
    message = reasoner.bind_tools([multiply], tool_choice=choice).invoke("What is 6 times 7?")
    assert _reasoning_of(message).strip()
    (call,) = message.tool_calls
    assert call["name"] == "multiply"
    multiply.args_schema.model_validate(call["args"])  # type: ignore[union-attr]
    assert "<tool_call>" not in _reasoning_of(message)


@pytest.mark.parametrize(("template", "format"), FAMILIES, ids=FAMILY_IDS)
@pytest.mark.parametrize("choice", ["auto", "any"])
def test_langchain_tool_calls_in_each_family(
    engine: Engine, template: str, format: ReasoningFormat, choice: str
) -> None:
    llm = ChatLlamaCpp(
        engine=engine, chat_template=template, temperature=0, max_tokens=120, reasoning_budget=16
    )
    message = llm.bind_tools([multiply], tool_choice=choice).invoke("What is 6 times 7?")
    assert isinstance(message.content, str)
    _no_markers(message.content, _reasoning_of(message))
    assert not message.invalid_tool_calls
    if choice == "any":
        assert len(message.tool_calls) >= 1
    for call in message.tool_calls:
        assert call["name"] == "multiply"
        multiply.args_schema.model_validate(call["args"])  # type: ignore[union-attr]


def test_langchain_switch_off_means_no_thinking(engine: Engine) -> None:
    llm = ChatLlamaCpp(
        engine=engine, chat_template=QWEN3, reasoning=False, temperature=0, max_tokens=20
    )
    message = llm.invoke("Hi")
    assert "reasoning_content" not in message.additional_kwargs
    assert message.usage_metadata is not None
    assert "output_token_details" not in message.usage_metadata


def test_langchain_history_gives_reasoning_back_where_the_template_renders_it(
    engine: Engine,
) -> None:
    llm = ChatLlamaCpp(engine=engine, chat_template=QWEN3, temperature=0, max_tokens=4)
    earlier = AIMessage("It is 4.", additional_kwargs={"reasoning_content": "two plus two"})
    history = [HumanMessage("2+2?"), earlier]
    shown = llm.get_num_tokens_from_messages(history)
    without = llm.get_num_tokens_from_messages([HumanMessage("2+2?"), AIMessage("It is 4.")])
    assert shown > without  # Qwen3 renders the last turn's reasoning
    llm.invoke([*history, HumanMessage("And 3+3?")])  # and a call with it runs


def test_langchain_profile_reports_reasoning_output(smollm_path: Path) -> None:
    assert ChatLlamaCpp(model=str(smollm_path), chat_template=QWQ).profile["reasoning_output"]
    assert not ChatLlamaCpp(model=str(smollm_path)).profile["reasoning_output"]


# -- LlamaIndex ----------------------------------------------------------------------------------


@pytest.fixture
def thinker(qwq_engine: Engine) -> LlamaCpp:
    return LlamaCpp(engine=qwq_engine, temperature=0, max_tokens=80, reasoning_budget=BUDGET)


def _thinking(message: LIChatMessage) -> ThinkingBlock:
    blocks = [block for block in message.blocks if isinstance(block, ThinkingBlock)]
    assert len(blocks) == 1
    return blocks[0]


def test_llama_index_thinking_block(thinker: LlamaCpp) -> None:
    response = thinker.chat([LIChatMessage(role="user", content="Tell me about the sea.")])
    thinking = _thinking(response.message)
    assert thinking.content and thinking.content.strip()
    assert isinstance(response.message.blocks[0], ThinkingBlock)
    assert any(isinstance(block, TextBlock) for block in response.message.blocks)
    _no_markers(thinking.content, response.message.content or "")
    assert thinking.num_tokens is not None and thinking.num_tokens > BUDGET
    assert response.raw["usage"]["reasoning_tokens"] == thinking.num_tokens


def test_llama_index_streams_thinking_deltas_first(thinker: LlamaCpp) -> None:
    messages = [LIChatMessage(role="user", content="Tell me about the sea.")]
    whole = thinker.chat(messages)
    kinds, deltas, last = [], "", None
    for response in thinker.stream_chat(messages):
        delta = response.additional_kwargs.get("thinking_delta")
        kinds += ["reasoning"] * bool(delta) + ["text"] * bool(response.delta)
        deltas += delta or ""
        last = response
    _reasoning_then_text(kinds)
    assert last is not None
    assert deltas == _thinking(last.message).content == _thinking(whole.message).content
    assert last.message.content == whole.message.content


def test_llama_index_structured_predict_after_thinking(thinker: LlamaCpp) -> None:
    from llama_index.core.prompts import PromptTemplate

    person = thinker.structured_predict(Person, PromptTemplate("{text}"), text="Ada is 36.")
    assert isinstance(person, Person)


def test_llama_index_thinking_off_per_call(engine: Engine) -> None:
    llm = LlamaCpp(engine=engine, chat_template=QWEN3, temperature=0, max_tokens=16)
    response = llm.chat([LIChatMessage(role="user", content="Hi")], thinking=False)
    assert not any(isinstance(block, ThinkingBlock) for block in response.message.blocks)
    assert response.raw["usage"]["reasoning_tokens"] == 0


def test_llama_index_gives_thinking_back(engine: Engine) -> None:
    llm = LlamaCpp(engine=engine, chat_template=QWEN3, temperature=0, max_tokens=4)
    earlier = LIChatMessage(
        role="assistant",
        blocks=[ThinkingBlock(content="two plus two"), TextBlock(text="It is 4.")],
    )
    question = LIChatMessage(role="user", content="2+2?")
    shown = llm.chat([question, earlier]).raw["usage"]["prompt_tokens"]
    plain = LIChatMessage(role="assistant", content="It is 4.")
    hidden = llm.chat([question, plain]).raw["usage"]["prompt_tokens"]
    assert shown > hidden  # Qwen3 renders the last turn's reasoning
