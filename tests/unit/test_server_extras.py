"""The llama-server extras and the chat fields beyond sampling, over an engine without a model:
which fields are refused or ignored, the reasoning asks (``reasoning``,
``chat_template_kwargs``, ``reasoning_effort``), ``n`` answers whole and streamed, a cut named
call, ``/tokenize``, ``/detokenize``, ``/apply-template`` and ``/v1/rerank``."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage as LlamaIndexMessage
from starlette.testclient import TestClient

from llamacpp_integrations.client import CallOptions, CallPlan, CallResult, request_of
from llamacpp_integrations.client.plan import reasoning_spec
from llamacpp_integrations.engine import (
    ChatRequest,
    Completion,
    Usage,
)
from llamacpp_integrations.errors import EngineOverloadedError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp
from llamacpp_integrations.server import ApiError, create_app
from llamacpp_integrations.server.openai.bodies import ChatBodies, ResponseIds, chat_response
from llamacpp_integrations.server.openai.choices import choice_plans, choices_usage
from llamacpp_integrations.server.openai.field_policy import IGNORED_CHAT_FIELDS
from llamacpp_integrations.server.openai.options import chat_options
from llamacpp_integrations.server.openai.options import chat_options as chat_call_options
from llamacpp_integrations.server.openai.reasoning import reasoning_ask
from llamacpp_integrations.server.openai.schemas import ChatCompletionBody
from llamacpp_integrations.testing import (
    SCRIPTED_TIMINGS,
    Answer,
    ScriptedEngine,
    ScriptedRerankingEngine,
    ScriptedTokenPieceEngine,
)
from llamacpp_integrations.tools import InvalidToolCall, ToolCallDelta, ToolStreamChunk
from tests.builders.reasoning_templates import QWEN3, QWEN3_FORMAT

from .tiny_model import INFO, by_length, tiny_engine

HI = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _body(**fields: Any) -> ChatCompletionBody:
    return ChatCompletionBody.model_validate({"messages": HI, **fields})


def _error(call: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    return caught.value


# ---- which fields are refused, which ignored ----------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("audio", {"voice": "alloy", "format": "mp3"}),
        ("modalities", ["text", "audio"]),
        ("functions", [{"name": "f"}]),
        ("function_call", "auto"),
        ("web_search_options", {}),  # an empty object asks for nothing: accepted below
        ("verbosity", "low"),
        ("n_probs", 5),
        ("json_schema", {"type": "object"}),
        ("ignore_eos", True),
        ("add_generation_prompt", False),
        ("repetition_penalty", 1.3),
    ],
)
def test_fields_that_would_change_the_answer_are_refused_by_name(field: str, value: Any) -> None:
    body = _body(**{field: value})
    if value == {}:
        chat_options(body, timeout=None)
        return
    error = _error(lambda: chat_options(body, timeout=None))
    assert (error.status, error.param, error.code) == (400, field, "unsupported_parameter")
    assert error.message.startswith(f"{field} is not supported: ")


def test_neutral_values_ignored_fields_and_unknown_fields_are_accepted() -> None:
    neutral = {
        "modalities": ["text"],
        "verbosity": "medium",
        "audio": None,
        "functions": [],
        "ignore_eos": False,
        "n_probs": 0,
        "typical_p": 1.0,
        "repetition_penalty": 1,
        "add_generation_prompt": True,
        "best_of": 1,
    }
    ignored = dict.fromkeys(IGNORED_CHAT_FIELDS, "x")
    unknown = {"cache_prompt": True, "id_slot": 3, "some_vendor_field": {"a": 1}}
    chat_options(_body(**neutral, **ignored, **unknown), timeout=None)


def test_legacy_completions_refuse_other_servers_extensions_too() -> None:
    client = TestClient(create_app(tiny_engine()))
    refused = client.post("/v1/completions", json={"prompt": "x", "mirostat": 2})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "mirostat"
    assert client.post("/v1/completions", json={"prompt": "x", "user": "u"}).status_code == 200


def test_a_boolean_is_not_a_neutral_number() -> None:
    # True == 1 in Python; a best_of of true is not the neutral best_of of 1.
    error = _error(lambda: chat_options(_body(best_of=True), timeout=None))
    assert error.param == "best_of"


# ---- reasoning asks -----------------------------------------------------------------------------


def test_enable_thinking_sets_the_reasoning_switch_and_reaches_the_template() -> None:
    ask = reasoning_ask(_body(chat_template_kwargs={"enable_thinking": False, "x": 1}), 1000)
    assert ask.reasoning is False and ask.budget is None
    assert ask.template_kwargs == {"enable_thinking": False, "x": 1}
    options = chat_call_options(
        _body(chat_template_kwargs={"enable_thinking": False, "x": 1}), timeout=None, context=256
    )
    assert options.reasoning is False and options.template_kwargs["x"] == 1
    request = request_of(options, messages=HI)
    assert isinstance(request, ChatRequest) and request.template_kwargs["x"] == 1


def test_reasoning_effort_maps_to_the_switch_and_a_share_of_the_limit() -> None:
    assert reasoning_ask(_body(reasoning_effort="none"), 800).reasoning is False
    assert reasoning_ask(_body(reasoning_effort="minimal"), 800).reasoning is False
    low = reasoning_ask(_body(reasoning_effort="low", max_tokens=800), 800)
    assert (low.reasoning, low.budget) == (True, 200)
    assert low.template_kwargs == {"reasoning_effort": "low"}  # gpt-oss templates read it
    medium = reasoning_ask(_body(reasoning_effort="medium"), 800)
    assert (medium.reasoning, medium.budget) == (True, 400)
    high = reasoning_ask(_body(reasoning_effort="high"), 800)
    assert (high.reasoning, high.budget) == (True, None)
    own = reasoning_ask(_body(reasoning_effort="low", reasoning_budget=7), 800)
    assert own.budget == 7
    max_effort = reasoning_ask(_body(reasoning_effort="max"), 800)
    assert max_effort.reasoning is True and "reasoning_effort" not in max_effort.template_kwargs
    # The limit is the answer's own when it sets one.
    options = chat_call_options(
        _body(reasoning_effort="medium", max_completion_tokens=100), timeout=None, context=256
    )
    assert options.reasoning_budget == 50


def test_reasoning_asks_that_disagree_or_are_not_booleans_are_refused() -> None:
    error = _error(
        lambda: reasoning_ask(
            _body(reasoning=True, chat_template_kwargs={"enable_thinking": False}), 100
        )
    )
    assert error.param == "chat_template_kwargs.enable_thinking" and error.status == 400
    error = _error(lambda: reasoning_ask(_body(reasoning=False, reasoning_effort="high"), 100))
    assert error.param == "reasoning_effort"
    error = _error(
        lambda: reasoning_ask(_body(chat_template_kwargs={"enable_thinking": "no"}), 100)
    )
    assert error.param == "chat_template_kwargs.enable_thinking"
    agree = reasoning_ask(
        _body(reasoning_effort="none", chat_template_kwargs={"enable_thinking": False}), 100
    )
    assert agree.reasoning is False


def test_a_templates_own_switch_among_template_kwargs_counts_as_the_reasoning_ask() -> None:
    kwargs = {"template_kwargs": {"enable_thinking": False}}
    options = CallOptions.merge({}, kwargs, owner="test")
    spec = reasoning_spec(QWEN3_FORMAT, options)
    assert spec is not None and spec.enabled is False
    # An explicit reasoning ask wins over the variable.
    both = CallOptions.merge({}, {**kwargs, "reasoning": True}, owner="test")
    spec = reasoning_spec(QWEN3_FORMAT, both)
    assert spec is not None and spec.enabled is True


def test_the_adapters_take_template_kwargs_per_call_too() -> None:
    engine = tiny_engine()
    ChatLlamaCpp(engine=engine).invoke("hi", template_kwargs={"x": 1})
    LlamaCpp(engine=engine).chat(
        [LlamaIndexMessage(role="user", content="hi")], template_kwargs={"y": 2}
    )
    assert [dict(r.template_kwargs) for r in engine.requests] == [{"x": 1}, {"y": 2}]


# ---- n answers ---------------------------------------------------------------------------------


def test_choice_plans_have_their_own_ids_and_derived_seeds() -> None:
    options = CallOptions.merge({}, {"seed": 2**32 - 1}, owner="test")
    plan = CallPlan(request_of(options, messages=HI))
    plans = choice_plans(plan, 3)
    assert [p.request.sampling.seed for p in plans] == [2**32 - 1, 0, 1]
    assert plans[0].request.request_id == plan.request.request_id
    assert len({p.request.request_id for p in plans}) == 3
    unseeded = CallPlan(request_of(CallOptions.merge({}, {}, owner="test"), messages=HI))
    assert [p.request.sampling.seed for p in choice_plans(unseeded, 2)] == [None, None]


def test_the_usage_of_n_answers_counts_the_prompt_once() -> None:
    usage = choices_usage(
        [
            Usage(prompt_tokens=10, completion_tokens=3, cached_prompt_tokens=0),
            Usage(
                prompt_tokens=10, completion_tokens=5, cached_prompt_tokens=8, reasoning_tokens=2
            ),
        ]
    )
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (10, 8, 18)
    assert (usage.cached_prompt_tokens, usage.reasoning_tokens) == (0, 2)


def _refusing_the_second() -> ScriptedEngine:
    """Refuses the second generation request it gets as a full queue."""
    ok = Answer(pieces=("o", "k"))
    return tiny_engine(answers=[ok, Answer.refused(EngineOverloadedError("full")), ok])


def _sse(text: str) -> list[dict[str, Any]]:
    events = [line.removeprefix("data: ") for line in text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


def test_n_answers_whole_and_streamed() -> None:
    engine = tiny_engine(script=("o", "k"))
    client = TestClient(create_app(engine))
    body = {"messages": HI, "n": 3, "seed": 5}
    answer = client.post("/v1/chat/completions", json=body).json()
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert all(c["message"]["content"] == "ok" for c in answer["choices"])
    assert answer["usage"]["prompt_tokens"] == 3 and answer["usage"]["completion_tokens"] == 6
    assert sorted(r.sampling.seed for r in engine.requests) == [5, 6, 7]
    streamed = client.post(
        "/v1/chat/completions",
        json=body | {"stream": True, "stream_options": {"include_usage": True}},
    )
    chunks = _sse(streamed.text)
    texts = {i: "" for i in range(3)}
    finishes = []
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        texts[choice["index"]] += choice["delta"].get("content", "")
        if choice["finish_reason"]:
            finishes.append(choice["index"])
    assert texts == {0: "ok", 1: "ok", 2: "ok"} and sorted(finishes) == [0, 1, 2]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    legacy = client.post("/v1/completions", json={"prompt": "x", "n": 2}).json()
    assert [c["index"] for c in legacy["choices"]] == [0, 1]


def test_one_refused_answer_refuses_the_request_before_anything_is_sent() -> None:
    client = TestClient(create_app(_refusing_the_second()))
    body = {"messages": HI, "n": 3, "stream": True}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 429 and response.json()["error"]["code"] == "queue_full"
    too_many = client.post("/v1/chat/completions", json={"messages": HI, "n": 17})
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "n"


# ---- a call cut by max_tokens ------------------------------------------------------------------


def _result(invalid: tuple[InvalidToolCall, ...]) -> CallResult:
    completion = Completion("req-1", "<tool_call>", (1,), "length", Usage(3, 1), SCRIPTED_TIMINGS)
    return CallResult("", (), completion, invalid_calls=invalid)


def test_a_cut_call_with_a_known_name_comes_back_with_its_arguments_so_far() -> None:
    ids = ResponseIds("chatcmpl", "req-1", "m")
    named = InvalidToolCall("call_1", "get_weather", '{"city": "Pa', "cut")
    nameless = InvalidToolCall("call_2", None, "", "cut")
    body = chat_response(ids, _result((named, nameless)), False)
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Pa'}
    assert call["id"] == "call_1"


def test_a_streamed_cut_call_is_sent_once_at_the_end_when_no_delta_of_it_went_out() -> None:
    bodies = ChatBodies(ResponseIds("chatcmpl", "req-1", "m"), False, index=2)
    streamed = ToolStreamChunk("req-1", "", (ToolCallDelta(0, "call_1", "f", '{"a": 1}'),))
    first = bodies.chunk(streamed)["choices"][0]
    assert first["index"] == 2 and first["delta"]["tool_calls"][0]["id"] == "call_1"
    cut = (
        InvalidToolCall("call_1", "f", '{"a": 1', "cut"),  # its deltas already went out
        InvalidToolCall("call_2", "g", "", "cut"),  # none did
    )
    last = ToolStreamChunk("req-1", "", finish_reason="length", invalid_calls=cut)
    choice = bodies.chunk(last)["choices"][0]
    assert choice["finish_reason"] == "length"
    (sent,) = choice["delta"]["tool_calls"]
    assert sent["index"] == 1 and sent["id"] == "call_2" and sent["function"]["name"] == "g"


# ---- /tokenize, /detokenize, /apply-template ---------------------------------------------------


def _half_character(token: int) -> bytes:
    """Token 7 is half of a two-byte character; the others are characters."""
    return b"\xc3" if token == 7 else chr(token).encode()


def test_tokenize_and_detokenize_as_llama_server_answers() -> None:
    client = TestClient(create_app(ScriptedTokenPieceEngine(info=INFO, piece=_half_character)))
    assert client.post("/tokenize", json={"content": "AB"}).json() == {"tokens": [65, 66]}
    mixed = client.post("/tokenize", json={"content": ["A", 7, "B"], "with_pieces": True})
    assert mixed.json() == {
        "tokens": [
            {"id": 65, "piece": "A"},
            {"id": 7, "piece": [0xC3]},  # not whole UTF-8: its byte values
            {"id": 66, "piece": "B"},
        ]
    }
    bad = client.post("/tokenize", json={"content": ["A", 100]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "content[1]"
    assert client.post("/detokenize", json={"tokens": [72, 73]}).json() == {"content": "HI"}
    bad = client.post("/detokenize", json={"tokens": [-1]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens[0]"
    missing = client.post("/detokenize", json={})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "tokens"


def test_a_piece_is_the_detokenized_text_on_an_engine_without_token_bytes() -> None:
    client = TestClient(create_app(tiny_engine()))
    answer = client.post("/tokenize", json={"content": "A", "with_pieces": True}).json()
    assert answer == {"tokens": [{"id": 65, "piece": "A"}]}


def test_apply_template_renders_what_the_chat_endpoint_would_read() -> None:
    engine = tiny_engine(info=replace(INFO, chat_template=QWEN3))
    client = TestClient(create_app(engine))
    body = {"messages": HI, "chat_template_kwargs": {"enable_thinking": False}}
    prompt = client.post("/apply-template", json=body).json()["prompt"]
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    client.post("/v1/chat/completions", json=body)
    (request,) = engine.requests
    assert isinstance(request, ChatRequest) and engine.render_chat(request) == prompt
    with_tools = client.post("/apply-template", json={"messages": HI, "tools": [WEATHER]})
    assert "get_weather" in with_tools.json()["prompt"]


# ---- /v1/rerank --------------------------------------------------------------------------------


def test_rerank_orders_by_score_cuts_to_top_n_and_returns_documents() -> None:
    client = TestClient(create_app(ScriptedRerankingEngine(info=INFO, score=by_length)))
    body = {"query": "q", "documents": ["aa", {"text": "aaaa"}, "a", "bb"], "top_n": 3}
    answer = client.post("/v1/rerank", json=body | {"return_documents": True}).json()
    assert answer["object"] == "list" and answer["model"] == "tiny-Q8_0"
    assert [r["index"] for r in answer["results"]] == [1, 0, 3]  # ties keep the given order
    assert [r["relevance_score"] for r in answer["results"]] == [4.0, 2.0, 2.0]
    assert answer["results"][0]["document"] == {"text": "aaaa"}
    # The query (1 token) with each document's tokens: 4 pairs.
    assert answer["usage"] == {"prompt_tokens": 4 + 9, "total_tokens": 4 + 9}
    for path in ("/rerank", "/reranking", "/v1/reranking"):
        plain = client.post(path, json=body).json()
        assert "document" not in plain["results"][0] and len(plain["results"]) == 3
    empty = client.post("/v1/rerank", json={"query": "q", "documents": []})
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "documents"


def test_rerank_on_an_engine_that_cannot_is_a_400_saying_why() -> None:
    client = TestClient(create_app(tiny_engine()))
    response = client.post("/v1/rerank", json={"query": "q", "documents": ["a"]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "model_cannot_rerank" and error["param"] == "model"
    assert "reranker" in error["message"]
