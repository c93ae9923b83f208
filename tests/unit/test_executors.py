"""The executors over a scripted engine: a full queue retried before the answer's first piece
(whole answers too), and an answer whose calls the loop guard all dropped continued with a
reply, the same whole or streamed, sync or async."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Generator
from typing import Any

import pytest

from llamacpp_integrations import client
from llamacpp_integrations.engine import (
    ChatRequest,
    Completion,
    GenerationRequest,
    StreamChunk,
    Timings,
    Usage,
)
from llamacpp_integrations.errors import EngineOverloadedError
from llamacpp_integrations.tools import HERMES, TemplateToolSupport

TIMINGS = Timings(0.0, 0.0, 0.0, 0.0, 0.0)
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


class ScriptedEngine:
    """Answers each request with the next step of a script: a text (5 tokens), or an error."""

    def __init__(self, *steps: str | Exception) -> None:
        self.steps = list(steps)
        self.requests: list[GenerationRequest] = []
        self.rendered: list[ChatRequest] = []

    def _next(self, request: GenerationRequest) -> str:
        self.requests.append(request)
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def render_chat(self, request: ChatRequest) -> str:
        self.rendered.append(request)
        return "PROMPT"

    def generate(self, request: GenerationRequest) -> Completion:
        text = self._next(request)
        return Completion(request.request_id, text, (), "stop", Usage(10, 5, 0), TIMINGS)

    async def agenerate(self, request: GenerationRequest) -> Completion:
        return self.generate(request)

    def stream(self, request: GenerationRequest) -> Generator[StreamChunk, None, None]:
        text = self._next(request)
        yield StreamChunk(request.request_id, text)
        yield StreamChunk(
            request.request_id, "", finish_reason="stop", usage=Usage(10, 5, 0), timings=TIMINGS
        )

    async def astream(self, request: GenerationRequest) -> AsyncGenerator[StreamChunk, None]:
        for chunk in self.stream(request):
            yield chunk


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
    engine = ScriptedEngine(EngineOverloadedError("full"), EngineOverloadedError("full"), "hi")
    plan = client.CallPlan(ChatRequest(messages=[{"role": "user", "content": "x"}]))
    assert run(how, engine, plan)[:2] == ("hi", "stop")
    assert len(engine.requests) == 3
    engine = ScriptedEngine(*[EngineOverloadedError("full")] * 3)
    with pytest.raises(EngineOverloadedError):
        run(how, engine, plan)
    assert len(engine.requests) == 3


@pytest.mark.parametrize("how", WAYS)
def test_a_dropped_repeat_is_continued_with_a_reply(how: str) -> None:
    plan = tool_plan(max_tokens=50)
    engine = ScriptedEngine(REPEAT, " Done.")
    text, finish_reason, usage = run(how, engine, plan)
    assert text.endswith(" Done.") and "tool_call" not in text
    assert finish_reason == "stop"
    assert usage == Usage(10, 10, 0)  # the first prompt, both parts' completions
    assert plan.tools is not None and engine.rendered == [plan.tools.request]
    follow = engine.requests[1]
    assert follow.max_tokens == 45  # what the first part left
    assert json.dumps(getattr(follow, "prompt", "")).startswith('"PROMPT')


@pytest.mark.parametrize("how", WAYS)
def test_no_room_for_the_reply_ends_the_answer_at_length(how: str) -> None:
    engine = ScriptedEngine(REPEAT)
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
    run(how, ScriptedEngine("hi"), plan)
    assert asked == []
    run(how, ScriptedEngine(EngineOverloadedError("full"), "hi"), plan)
    assert asked == [0]
