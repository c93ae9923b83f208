"""The llama-server extras and the chat fields beyond sampling, on the real model, with raw HTTP,
the ``openai`` client and LangChain's ``ChatOpenAI``: ``/tokenize`` and ``/detokenize``,
``/apply-template`` (the prompt the chat endpoint reads), ``chat_template_kwargs`` and
``reasoning_effort`` on a reasoning template, ``n`` answers whole and streamed, refused and
ignored fields, a named call cut by ``max_tokens``, and ``/v1/rerank`` on a tiny random
reranker.

SmolLM2-135M is weak and the reranker random: these tests check shapes, counts, finish reasons
and orderings the server guarantees, never what the text or the scores say.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine.engine import Engine
from tests.builders.reasoning_templates import QWEN3
from tests.builders.tiny_encoder import build_tiny_encoder
from tests.integration.serve_helpers import WEATHER, running_server

FORCED = {"type": "function", "function": {"name": "get_weather"}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NO_THINKING = "<|im_start|>assistant\n<think>\n\n</think>\n\n"  # QWEN3's prompt with it off


@pytest.fixture(scope="module")
def base(engine: Engine) -> Iterator[str]:
    with running_server(engine) as url:
        yield url


@pytest.fixture(scope="module")
def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def thinking_base(smollm_path: Path) -> Iterator[str]:
    """SmolLM2 under a Qwen3-style template: an ``enable_thinking`` switch whose "off" prompt
    closes an empty think block."""
    config = EngineConfig(
        model=str(smollm_path), chat_template=QWEN3, n_seq_max=2, n_ctx_per_seq=1024
    )
    with Engine(config) as thinking, running_server(thinking) as url:
        yield url


@pytest.fixture(scope="module")
def rerank_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = build_tiny_encoder(
        tmp_path_factory.mktemp("reranker") / "tiny-reranker.gguf",
        reranker=True,
        name="tiny-reranker",
    )
    with Engine(model=str(path)) as reranker, running_server(reranker) as url:
        yield url


def _post(url: str, body: dict[str, Any]) -> Any:
    response = httpx.post(url, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


# ---- /tokenize, /detokenize, /apply-template ---------------------------------------------------


def test_tokenize_and_detokenize_round_trip(base: str, engine: Engine) -> None:
    text = "Paris, 媽 and 🤗: what is the weather?"
    tokens = _post(f"{base}/tokenize", {"content": text})["tokens"]
    assert tokens == engine.tokenize(text, parse_special=True)
    assert _post(f"{base}/detokenize", {"tokens": tokens}) == {"content": text}
    pieces = _post(f"{base}/tokenize", {"content": text, "with_pieces": True})["tokens"]
    assert [p["id"] for p in pieces] == tokens
    # Pieces that are part of a character come as byte values; together they are the text.
    raw = b"".join(
        p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces
    )
    assert raw.decode() == text and any(isinstance(p["piece"], list) for p in pieces)
    control = {"content": "<|im_end|>"}
    assert len(_post(f"{base}/tokenize", control)["tokens"]) == 1
    assert len(_post(f"{base}/tokenize", control | {"parse_special": False})["tokens"]) > 1
    mixed = _post(f"{base}/tokenize", {"content": ["Hi", tokens[0], "there"]})["tokens"]
    assert mixed[len(engine.tokenize("Hi"))] == tokens[0]
    bad = httpx.post(f"{base}/detokenize", json={"tokens": [1, 10**9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens[1]"


@pytest.mark.parametrize(
    "extra",
    [{}, {"tools": [WEATHER]}, {"tools": [WEATHER], "tool_choice": FORCED}],
    ids=["plain", "tools", "forced-call"],
)
def test_apply_template_is_the_prompt_the_chat_endpoint_reads(
    base: str, client: openai.OpenAI, extra: dict[str, Any]
) -> None:
    prompt = _post(f"{base}/apply-template", {"messages": ASK, **extra})["prompt"]
    tokens = _post(f"{base}/tokenize", {"content": prompt, "add_special": True})["tokens"]
    answer = client.chat.completions.create(model="m", messages=ASK, max_tokens=1, **extra)
    assert answer.usage is not None and answer.usage.prompt_tokens == len(tokens)
    assert prompt.endswith("<|im_start|>assistant\n")


# ---- reasoning asks on a reasoning template ----------------------------------------------------


def test_enable_thinking_false_closes_the_thinking_and_nothing_is_read_as_reasoning(
    thinking_base: str,
) -> None:
    off = {"messages": ASK, "chat_template_kwargs": {"enable_thinking": False}}
    assert _post(f"{thinking_base}/apply-template", off)["prompt"].endswith(NO_THINKING)
    default = _post(f"{thinking_base}/apply-template", {"messages": ASK})["prompt"]
    assert not default.endswith(NO_THINKING)
    chat = openai.OpenAI(base_url=f"{thinking_base}/v1", api_key="unused", max_retries=0)
    kwargs = {"chat_template_kwargs": {"enable_thinking": False}}
    answer = chat.chat.completions.create(
        model="m", messages=ASK, max_tokens=16, temperature=0, extra_body=kwargs
    )
    message = answer.choices[0].message
    assert message.content and getattr(message, "reasoning_content", None) is None
    assert answer.usage is not None and answer.usage.completion_tokens_details is not None
    assert answer.usage.completion_tokens_details.reasoning_tokens == 0
    stream = chat.chat.completions.create(
        model="m", messages=ASK, max_tokens=16, temperature=0, stream=True, extra_body=kwargs
    )
    deltas = [chunk.choices[0].delta for chunk in stream if chunk.choices]
    assert not any(getattr(d, "reasoning_content", None) for d in deltas)


def test_reasoning_effort_turns_thinking_off_or_on(thinking_base: str) -> None:
    url = f"{thinking_base}/apply-template"
    assert _post(url, {"messages": ASK, "reasoning_effort": "none"})["prompt"].endswith(NO_THINKING)
    assert not _post(url, {"messages": ASK, "reasoning_effort": "low"})["prompt"].endswith(
        NO_THINKING
    )
    disagree = {"messages": ASK, "reasoning_effort": "high", "reasoning": False}
    refused = httpx.post(f"{thinking_base}/v1/chat/completions", json=disagree)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "reasoning_effort"
    chat = openai.OpenAI(base_url=f"{thinking_base}/v1", api_key="unused", max_retries=0)
    answer = chat.chat.completions.create(
        model="m", messages=ASK, max_tokens=12, temperature=0, reasoning_effort="minimal"
    )
    assert getattr(answer.choices[0].message, "reasoning_content", None) is None


# ---- n answers ----------------------------------------------------------------------------------


def test_n_answers_whole_count_the_prompt_once(client: openai.OpenAI) -> None:
    one = client.chat.completions.create(model="m", messages=ASK, max_tokens=1)
    answer = client.chat.completions.create(
        model="m", messages=ASK, n=3, max_tokens=10, temperature=1.0, seed=7, logprobs=True
    )
    assert sorted(c.index for c in answer.choices) == [0, 1, 2]
    assert all(c.finish_reason in ("stop", "length") for c in answer.choices)
    assert answer.usage is not None and one.usage is not None
    assert answer.usage.prompt_tokens == one.usage.prompt_tokens
    # Each choice's log-probabilities are its tokens: the completion tokens are their sum.
    counts = [len(c.logprobs.content or []) for c in answer.choices if c.logprobs]
    assert len(counts) == 3 and all(1 <= count <= 10 for count in counts)
    assert answer.usage.completion_tokens == sum(counts)


def test_n_answers_streamed_each_chunk_naming_its_choice(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="m",
        messages=ASK,
        n=3,
        max_tokens=10,
        temperature=1.0,
        logprobs=True,
        stream=True,
        stream_options={"include_usage": True},
    )
    tokens = dict.fromkeys(range(3), 0)
    finished: dict[int, str] = {}
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            assert choice.index not in finished  # nothing after a choice's finish
            if choice.logprobs and choice.logprobs.content:
                tokens[choice.index] += len(choice.logprobs.content)
            if choice.finish_reason is not None:
                finished[choice.index] = choice.finish_reason
    assert sorted(finished) == [0, 1, 2] and set(finished.values()) <= {"stop", "length"}
    assert usage is not None and usage.completion_tokens == sum(tokens.values())
    assert all(1 <= count <= 10 for count in tokens.values())


# ---- refused and ignored fields -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text", "audio"]}, None),
        ({"web_search_options": {"search_context_size": "low"}}, "web_search_options"),
        ({"extra_body": {"n_probs": 3}}, "n_probs"),
        ({"extra_body": {"guided_json": {"type": "object"}}}, "guided_json"),
        ({"n": 17}, "n"),
    ],
)
def test_fields_that_cannot_be_honoured_are_refused(
    client: openai.OpenAI, fields: dict[str, Any], param: str | None
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=ASK, max_tokens=4, **fields)
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] in ((param,) if param else ("audio", "modalities"))


def test_fields_that_change_nothing_here_are_accepted(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="m",
        messages=ASK,
        max_tokens=4,
        user="u-1",
        metadata={"k": "v"},
        store=False,
        service_tier="auto",
        prompt_cache_key="k",
        safety_identifier="s",
        modalities=["text"],
        extra_body={"cache_prompt": True, "some_vendor_field": 1},
    )
    assert answer.choices[0].finish_reason in ("stop", "length")


# ---- a named call cut by max_tokens ------------------------------------------------------------


def test_a_forced_call_cut_by_max_tokens_comes_back_named_with_finish_reason_length(
    client: openai.OpenAI, base: str
) -> None:
    cut = client.chat.completions.create(
        model="m", messages=ASK, tools=[WEATHER], tool_choice=FORCED, max_tokens=4
    )
    choice = cut.choices[0]
    assert choice.finish_reason == "length" and choice.message.tool_calls
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    stream = client.chat.completions.create(
        model="m",
        messages=ASK,
        tools=[WEATHER],
        tool_choice=FORCED,
        max_tokens=4,
        stream=True,
    )
    names, reasons = "", []
    for chunk in stream:
        for streamed in chunk.choices:
            for delta in streamed.delta.tool_calls or []:
                names += (delta.function and delta.function.name) or ""
            reasons.append(streamed.finish_reason)
    assert names == "get_weather" and reasons[-1] == "length"
    # LangChain's ChatOpenAI: the cut call keeps its name; with no arguments written yet it
    # reads as a call with no arguments, so an agent must check finish_reason.
    llm = ChatOpenAI(base_url=f"{base}/v1", api_key="unused", model="m", max_tokens=4)
    message = llm.bind_tools([WEATHER], tool_choice="get_weather").invoke("Weather in Paris?")
    assert isinstance(message, AIMessage)
    assert message.response_metadata["finish_reason"] == "length"
    named = [c["name"] for c in message.tool_calls] + [
        c["name"] for c in message.invalid_tool_calls
    ]
    assert named == ["get_weather"]


# ---- /v1/rerank --------------------------------------------------------------------------------

DOCS = ["the river runs to the sea", "bread of copper", "a blue sky", "owl", "fish in water"]


def test_rerank_ranks_every_document_most_relevant_first(rerank_base: str) -> None:
    body = {"model": "any", "query": "what is the river", "documents": DOCS}
    answer = _post(f"{rerank_base}/v1/rerank", body)
    assert answer["object"] == "list" and answer["model"] == "tiny-reranker"
    results = answer["results"]
    assert sorted(r["index"] for r in results) == list(range(len(DOCS)))
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert "document" not in results[0]
    assert answer["usage"]["prompt_tokens"] == answer["usage"]["total_tokens"] > len(DOCS)
    top = _post(
        f"{rerank_base}/rerank",
        body | {"top_n": 2, "return_documents": True, "documents": [{"text": d} for d in DOCS]},
    )
    assert [r["index"] for r in top["results"]] == [r["index"] for r in results[:2]]
    assert [r["document"]["text"] for r in top["results"]] == [
        DOCS[r["index"]] for r in results[:2]
    ]
    for path in ("/reranking", "/v1/reranking"):
        assert len(_post(f"{rerank_base}{path}", body)["results"]) == len(DOCS)


def test_rerank_on_a_generative_model_is_a_400_saying_why(base: str) -> None:
    response = httpx.post(f"{base}/v1/rerank", json={"query": "q", "documents": ["d"]})
    assert response.status_code == 400
    assert "rerank" in json.dumps(response.json()["error"]["message"])
