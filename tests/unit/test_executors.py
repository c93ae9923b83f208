"""The executors over a scripted engine: a full queue retried before the answer's first piece
(whole answers too), and an answer whose calls the loop guard all dropped continued with a
reply, the same whole or streamed, sync or async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from llamacpp_integrations import client
from llamacpp_integrations.engine import (
    ChatRequest,
    CompletionRequest,
    Usage,
)
from llamacpp_integrations.errors import EngineOverloadedError
from llamacpp_integrations.testing import Answer, ScriptedEngine
from llamacpp_integrations.tools import HERMES, TemplateToolSupport

RETRY = client.RetryPolicy(max_retries=2, base_delay_s=0.0)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    }
]
REPEAT = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'


FULL = Answer.refused(EngineOverloadedError("full"))


def said(text: str) -> Answer:
    """An answer of ``text`` in five chunks: five tokens."""
    return Answer(pieces=[text[len(text) * i // 5 : len(text) * (i + 1) // 5] for i in range(5)])


def scripted(*answers: Answer) -> ScriptedEngine:
    """Answers each request with the next answer (after a prompt of 10 tokens)."""
    return ScriptedEngine(answers=answers, prompt_tokens=10)


def tool_plan(max_tokens: int) -> client.CallPlan:
    """A tool call after the conversation already called ``add(a=1)`` and has its result."""
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    history = [
        {"role": "user", "content": "add 1"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "2"},
    ]
    request = ChatRequest(messages=history, max_tokens=max_tokens)
    support = TemplateToolSupport(True, True, True, HERMES)
    return client.tool_plan(None, request, TOOLS, support=support)  # type: ignore[arg-type]


def run(how: str, engine: ScriptedEngine, plan: client.CallPlan) -> tuple[str, str, Any]:
    """The answer's text, finish reason and usage, run one of the four ways."""
    any_engine: Any = engine
    if how == "generate":
        result = client.generate(any_engine, plan, RETRY)
        return result.content, result.finish_reason, result.completion.usage
    if how == "agenerate":
        result = asyncio.run(client.agenerate(any_engine, plan, RETRY))
        return result.content, result.finish_reason, result.completion.usage

    async def collect() -> list[Any]:
        return [piece async for piece in client.astream(any_engine, plan, RETRY)]

    pieces = (
        list(client.stream(any_engine, plan, RETRY)) if how == "stream" else asyncio.run(collect())
    )
    assert all(p.finish_reason is None for p in pieces[:-1])
    return "".join(p.text for p in pieces), pieces[-1].finish_reason, pieces[-1].usage


WAYS = ["generate", "agenerate", "stream", "astream"]


@pytest.mark.parametrize("how", WAYS)
def test_a_full_queue_is_retried_before_the_first_piece(how: str) -> None:
    engine = scripted(FULL, FULL, said("hi"))
    plan = client.CallPlan(ChatRequest(messages=[{"role": "user", "content": "x"}]))
    assert run(how, engine, plan)[:2] == ("hi", "stop")
    assert len(engine.requests) == 3
    engine = scripted(FULL)  # the last answer repeats
    with pytest.raises(EngineOverloadedError):
        run(how, engine, plan)
    assert len(engine.requests) == 3


@pytest.mark.parametrize("how", WAYS)
def test_a_dropped_repeat_is_continued_with_a_reply(how: str) -> None:
    plan = tool_plan(max_tokens=50)
    engine = scripted(said(REPEAT), said(" Done."))
    text, finish_reason, usage = run(how, engine, plan)
    assert text.endswith(" Done.") and "tool_call" not in text
    assert finish_reason == "stop"
    assert usage == Usage(10, 10, 0)  # the first prompt, both parts' completions
    assert plan.tools is not None and engine.rendered == [plan.tools.request]
    follow = engine.requests[1]
    assert follow.max_tokens == 45  # what the first part left
    assert isinstance(follow, CompletionRequest) and isinstance(follow.prompt, str)
    assert follow.prompt.startswith(engine.render_chat(plan.tools.request))


@pytest.mark.parametrize("how", WAYS)
def test_no_room_for_the_reply_ends_the_answer_at_length(how: str) -> None:
    engine = scripted(said(REPEAT))
    text, finish_reason, _ = run(how, engine, tool_plan(max_tokens=5))
    assert "tool_call" not in text
    assert finish_reason == "length"
    assert len(engine.requests) == 1


@pytest.mark.parametrize("how", WAYS)
def test_the_policy_is_asked_for_a_pause_only_after_a_refusal(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []
    pause = client.RetryPolicy.pause

    def recorded(policy: client.RetryPolicy, attempt: int) -> float | None:
        asked.append(attempt)
        return pause(policy, attempt)

    monkeypatch.setattr(client.RetryPolicy, "pause", recorded)
    plan = client.CallPlan(ChatRequest(messages=[{"role": "user", "content": "x"}]))
    run(how, scripted(said("hi")), plan)
    assert asked == []
    run(how, scripted(FULL, said("hi")), plan)
    assert asked == [0]
