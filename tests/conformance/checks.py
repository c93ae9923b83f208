"""The conformance checks one chat template goes through on the real model, as a user meets it.

Each check is what a LangChain user does with a model whose template is this one
(``ChatLlamaCpp(chat_template=...)``): a plain answer, a history holding a tool call and its
result, a named call, a call with ``tool_choice="any"``, a structured answer, and thinking
switched off. A check passes when the integration kept its promise (no error, the call named
and its arguments valid against the tool's schema, the structured answer valid), not when the
tiny model said something sensible.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

from jsonschema import validate
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import BaseModel, Field

from llamacpp_integrations.engine import ChatRequest, InferenceEngine
from llamacpp_integrations.errors import ChatTemplateError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.prompts.chat_rendering import ChatTemplates
from llamacpp_integrations.tools import detect_reasoning, detect_tool_support

MAX_TOKENS = 128
"""What a check that needs an answer may generate: room for a call after some thinking."""
SHORT = 8
THINKING = 48
"""What a thinking check may generate: enough to open and perhaps close the thinking."""
CONTEXT = 4096
"""Each sequence's context: the longest prompt (gpt-oss's, with tools) with room to spare."""
"""What a check that only needs the exchange to work may generate."""
MARKERS = ("<think>", "</think>", "<|channel|>", "<|message|>", "<|end|>")


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"Sunny in {city}"


@tool
def get_time(timezone: str) -> str:
    """Get the current time in a timezone."""
    return f"12:00 in {timezone}"


class Person(BaseModel):
    """A person mentioned in the text."""

    name: str = Field(description="The person's name")
    age: int = Field(description="Their age in years")


SYSTEM = SystemMessage("You are a helpful assistant.")
QUESTION = HumanMessage("What is the weather like in Paris today?")
HISTORY: list[BaseMessage] = [
    SYSTEM,
    QUESTION,
    AIMessage(
        "",
        tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call0pari"}],
    ),
    ToolMessage("Sunny, 21 degrees.", tool_call_id="call0pari"),
    HumanMessage("Thanks. Should I take an umbrella?"),
]
QUESTION_DICT = {"role": "user", "content": "Hello."}
WEATHER_SCHEMA = get_weather.tool_call_schema.model_json_schema()


@dataclass
class Outcome:
    """One check's result: passed, or why not."""

    passed: bool
    detail: str = ""


@dataclass
class TemplateReport:
    name: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)


async def _plain(llm: ChatLlamaCpp) -> Outcome:
    message = await llm.ainvoke([SYSTEM, HumanMessage("Say hello in one sentence.")])
    return Outcome(True, _preview(message))


async def _history(llm: ChatLlamaCpp) -> Outcome:
    message = await llm.ainvoke(HISTORY)
    return Outcome(True, _preview(message))


async def _named(llm: ChatLlamaCpp) -> Outcome:
    bound = llm.bind_tools([get_weather, get_time], tool_choice="get_weather")
    message = await bound.ainvoke([SYSTEM, QUESTION])
    assert isinstance(message, AIMessage)
    calls = message.tool_calls
    if len(calls) != 1 or calls[0]["name"] != "get_weather":
        return Outcome(False, f"calls: {calls!r}; text: {_preview(message)}")
    try:
        validate(calls[0]["args"], WEATHER_SCHEMA)
    except Exception as exc:
        return Outcome(False, f"invalid arguments {calls[0]['args']!r}: {exc}")
    return Outcome(True, repr(calls[0]["args"]))


async def _any(llm: ChatLlamaCpp) -> Outcome:
    bound = llm.bind_tools([get_weather, get_time], tool_choice="any")
    message = await bound.ainvoke([SYSTEM, QUESTION])
    assert isinstance(message, AIMessage)
    calls = message.tool_calls
    if not calls or any(c["name"] not in ("get_weather", "get_time") for c in calls):
        return Outcome(False, f"calls: {calls!r}; text: {_preview(message)}")
    return Outcome(True, ", ".join(c["name"] for c in calls))


async def _structured(llm: ChatLlamaCpp) -> Outcome:
    runnable = llm.with_structured_output(Person)
    person = await runnable.ainvoke(
        [SYSTEM, HumanMessage("Alice is 31 years old. Extract the person.")]
    )
    if not isinstance(person, Person):
        return Outcome(False, f"got {person!r}")
    return Outcome(True, person.model_dump_json())


async def _thinking(llm: ChatLlamaCpp, on: bool) -> Outcome:
    message = await llm.ainvoke(
        [SYSTEM, HumanMessage("Say hello in one sentence.")], reasoning=on, max_tokens=THINKING
    )
    text = message.content if isinstance(message.content, str) else ""
    leaked = [marker for marker in MARKERS if marker in text]
    if leaked:
        return Outcome(False, f"reasoning markers {leaked} in the answer: {_preview(message)}")
    return Outcome(True, _preview(message))


def _preview(message: BaseMessage) -> str:
    text = message.content if isinstance(message.content, str) else repr(message.content)
    reasoning = message.additional_kwargs.get("reasoning_content") or ""
    return f"text={text[:60]!r} reasoning={reasoning[:40]!r}"


CHECKS: dict[str, Callable[[ChatLlamaCpp], Awaitable[Outcome]]] = {
    "plain": _plain,
    "history": _history,
    "named": _named,
    "any": _any,
    "structured": _structured,
    "thinking on": lambda llm: _thinking(llm, True),
    "thinking off": lambda llm: _thinking(llm, False),
}
NEEDS_ROOM = frozenset({"named", "any", "structured"})
REASONING_CHECKS = frozenset({"thinking on", "thinking off"})
"""Run only on templates that show a reasoning format: elsewhere they are the plain check."""


def thinks(source: str) -> bool:
    """Whether the template shows a reasoning format (probed by rendering, no model)."""
    renderer = ChatTemplates(None)
    try:
        return detect_reasoning(cast(InferenceEngine, renderer), source) is not None
    except ChatTemplateError:
        return False


def behaviour(source: str) -> tuple[object, ...]:
    """What decides how the package treats a template: its tool-call style, its reasoning
    format's shape and the polyfills it needs (probed by rendering, no model). Templates alike
    in all three take the same paths."""
    renderer = ChatTemplates(None)
    engine = cast(InferenceEngine, renderer)
    try:
        support = detect_tool_support(engine, source)
        format = detect_reasoning(engine, source)
        caps = renderer.template_for(ChatRequest(messages=[QUESTION_DICT], chat_template=source))
    except ChatTemplateError as exc:
        return ("fails", str(exc))
    style = support.syntax.name if support.syntax else ("own prompt", support.renders_tools)
    shape = (
        None
        if format is None
        else (format.family, format.starts_inside, format.switch is not None, format.default_on)
    )
    return (style, shape, caps.caps)


def representatives(templates: dict[str, str]) -> dict[str, str]:
    """Few templates that between them show every tool-call style, every reasoning shape and
    every set of polyfills ``behaviour`` tells apart (each at least once, not every
    combination): greedily, the template showing the most not yet shown, first by name."""
    kinds = {name: behaviour(templates[name]) for name in sorted(templates)}
    # A behaviour's parts, each tagged with its place so equal values of two parts differ.
    parts = {name: set(enumerate(kind)) for name, kind in kinds.items()}
    shown: set[tuple[int, object]] = set()
    chosen: list[str] = []
    while True:
        name = max(parts, key=lambda n: len(parts[n] - shown))
        if not parts[name] - shown:
            break
        chosen.append(name)
        shown |= parts[name]
    return {name: templates[name] for name in sorted(chosen)}


def checks_for(source: str) -> list[str]:
    """The checks a template goes through."""
    skipped = frozenset() if thinks(source) else REASONING_CHECKS
    return [name for name in CHECKS if name not in skipped]


async def run_check(name: str, llm: ChatLlamaCpp) -> Outcome:
    try:
        return await CHECKS[name](llm)
    except Exception as exc:  # the check's report: which error, not a crash of the suite
        return Outcome(False, f"{type(exc).__name__}: {str(exc)[:200]}")


async def run_all(
    templates: dict[str, str], model: str, checks: list[str] | None = None, *, limit: int = 16
) -> list[TemplateReport]:
    """Every check (of ``checks``, default all) each template goes through (``checks_for``),
    ``limit`` at a time on one shared engine."""
    gate = asyncio.Semaphore(limit)
    reports = [TemplateReport(name) for name in templates]
    wanted = set(checks or CHECKS)

    async def one(report: TemplateReport, source: str, check: str) -> None:
        max_tokens = MAX_TOKENS if check in NEEDS_ROOM else SHORT
        llm = ChatLlamaCpp(
            model=model,
            chat_template=source,
            max_tokens=max_tokens,
            temperature=0,
            n_seq_max=limit,
            n_ctx_per_seq=CONTEXT,
        )
        async with gate:
            report.outcomes[check] = await run_check(check, llm)

    await asyncio.gather(
        *(
            one(report, templates[report.name], check)
            for report in reports
            for check in checks_for(templates[report.name])
            if check in wanted
        )
    )
    return reports
