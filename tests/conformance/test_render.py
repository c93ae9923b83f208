"""Every real chat template renders the conversations users send, the way the engines render.

For each template llama.cpp ships (``real_templates``), each conversation goes through
``ChatTemplates.render`` (what the local and the remote engine call) with a ``ChatRequest``:

a. a system message and a user turn; b. a user turn alone; c. a system message and a
multi-turn chat; d. (a) with two tools in the OpenAI function format; e. a tool history: a
call, its result, and the user's next question; f. a user turn with an image part (as the
engine's media marker, which every template renders as text).

(d) and (e) also go the way the client sends them: the template's tool support and reasoning
format probed, and the request planned by ``tools.plan_tool_request`` (native history for
templates whose call syntax the package knows, the fallback prompt otherwise). Every prompt must
hold the system and user texts. No model is loaded: this runs in seconds.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

import pytest

from llamacpp_integrations.engine import ChatRequest, InferenceEngine, ReasoningSpec
from llamacpp_integrations.prompts.chat_rendering import ChatTemplates
from llamacpp_integrations.prompts.media import ImageInput
from llamacpp_integrations.prompts.polyfills import template_variables
from llamacpp_integrations.prompts.template_caps import NO_POLYFILLS
from llamacpp_integrations.tools import detect_reasoning, detect_tool_support, plan_tool_request

from .real_templates import real_templates

TEMPLATES = real_templates()
MARKER = "<__media__>"

SYSTEM_TEXT = "You answer in one short sentence, system_s1."
USER_TEXT = "What is the weather like in Paris today, user_u1?"
ANSWER_TEXT = "It is sunny in Paris, answer_a1."
NEXT_TEXT = "And in Rome, user_u2?"
RESULT_TEXT = "Sunny, 21 C, result_r1"

SYSTEM: dict[str, Any] = {"role": "system", "content": SYSTEM_TEXT}
USER: dict[str, Any] = {"role": "user", "content": USER_TEXT}
NEXT: dict[str, Any] = {"role": "user", "content": NEXT_TEXT}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city."}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
]
CALL: dict[str, Any] = {
    "id": "call0pari",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
}
TOOL_HISTORY: list[dict[str, Any]] = [
    SYSTEM,
    USER,
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call0pari", "content": RESULT_TEXT},
    NEXT,
]
IMAGE = ImageInput(1, 1, b"\x00\x00\x00")

# (messages, tools, texts every prompt must hold)
CASES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None, tuple[str, ...]]] = {
    "system+user": ([SYSTEM, USER], None, (SYSTEM_TEXT, USER_TEXT)),
    "user": ([USER], None, (USER_TEXT,)),
    "multi-turn": (
        [SYSTEM, USER, {"role": "assistant", "content": ANSWER_TEXT}, NEXT],
        None,
        (SYSTEM_TEXT, USER_TEXT, ANSWER_TEXT, NEXT_TEXT),
    ),
    "tools": ([SYSTEM, USER], TOOLS, (SYSTEM_TEXT, USER_TEXT)),
    "tool-history": (TOOL_HISTORY, TOOLS, (SYSTEM_TEXT, USER_TEXT, NEXT_TEXT, RESULT_TEXT)),
}
TOOL_CASES = [name for name, (_, tools, _) in CASES.items() if tools is not None]

XFAIL: dict[tuple[str, str], str] = {}
"""(template, case) pairs a template cannot render however adapted, with the template's
reason: none left."""


@functools.cache
def templates(name: str) -> ChatTemplates:
    """The template compiled once for all the cases (compiling is most of the time here)."""
    return ChatTemplates(TEMPLATES[name], bos_token="<s>", eos_token="</s>")


def renderer(name: str) -> InferenceEngine:
    # Probing and planning only ever call render_chat, which ChatTemplates has.
    return cast(InferenceEngine, templates(name))


def params(cases: Sequence[str]) -> list[Any]:
    return [
        pytest.param(
            name,
            case,
            marks=[pytest.mark.xfail(reason=XFAIL[name, case], strict=True)]
            if (name, case) in XFAIL
            else [],
            id=f"{name}-{case}",
        )
        for name in TEMPLATES
        for case in cases
    ]


def assert_holds(prompt: str, texts: Sequence[str]) -> None:
    missing = [text for text in texts if text not in prompt]
    assert not missing, f"{missing} missing from the prompt:\n{prompt}"


@pytest.mark.parametrize(("name", "case"), params(list(CASES)))
def test_renders(name: str, case: str) -> None:
    messages, tools, texts = CASES[case]
    prompt, images = templates(name).render(ChatRequest(messages=messages, tools=tools))
    assert_holds(prompt, texts)
    assert images == []


@functools.cache
def client_facts(name: str) -> tuple[Any, ReasoningSpec | None]:
    """What the client probes once per template: tool support and reasoning format."""
    engine = renderer(name)
    format = detect_reasoning(engine)
    return detect_tool_support(engine), None if format is None else ReasoningSpec(format)


@pytest.mark.parametrize(("name", "case"), params(TOOL_CASES))
def test_renders_as_the_client_plans_it(name: str, case: str) -> None:
    messages, tools, texts = CASES[case]
    support, reasoning = client_facts(name)
    request = ChatRequest(messages=messages, reasoning=reasoning)
    assert tools is not None
    plan = plan_tool_request(renderer(name), request, tools, support=support)
    assert_holds(templates(name).render_chat(plan.request), texts)


@pytest.mark.parametrize(("name", "case"), params(["image"]))
def test_renders_an_image_part(name: str, case: str) -> None:
    parts = [{"type": "text", "text": USER_TEXT}, {"type": "image", "image": IMAGE}]
    request = ChatRequest(messages=[SYSTEM, {"role": "user", "content": parts}])
    prompt, images = templates(name).render(request, marker=MARKER)
    assert_holds(prompt, (SYSTEM_TEXT, USER_TEXT, MARKER))
    assert prompt.count(MARKER) == 1 and images == [IMAGE]


# -- what the polyfills leave alone ----------------------------------------------------------------


@pytest.mark.parametrize("name", TEMPLATES)
def test_templates_needing_nothing_render_as_they_are(name: str) -> None:
    """The prompt of a template that refuses nothing is what it renders by itself (with the
    variables it reads unset given values): prompt caching depends on that."""
    template = templates(name).template_for(ChatRequest(messages=[USER]))
    if template.caps != NO_POLYFILLS:
        pytest.skip(f"adapted: {template.caps}")
    for messages, tools, _ in CASES.values():
        variables = template_variables(template.reads, tools)
        exact = template.render_exact(messages, tools=tools, **variables)
        assert template.render(messages, tools=tools) == exact


# What was found on the templates of llama-cpp-python 0.3.36 (a family missing from another
# version's set is skipped).
EXPECTED_CAPS: dict[str, dict[str, Any]] = {
    "google-gemma-2-2b-it": {"system_role": False, "tool_role": False, "strict_alternation": True},
    "mistralai-Mistral-Nemo-Instruct-2407": {"strict_alternation": True, "tool_answer_bridge": ""},
    "Mistral-Small-3.2-24B-Instruct-2506": {"strict_alternation": True, "tool_answer_bridge": ""},
    "mistralai-Ministral-3-14B-Reasoning-2512": {
        "strict_alternation": True,
        "tool_answer_bridge": " ",
    },
    "meetkai-functionary-medium-v3.2": {"string_arguments": True},
    "CohereForAI-c4ai-command-r-plus-tool_use": {"described_parameters": True},
    "microsoft-Phi-3.5-mini-instruct": {"tool_role": False},
}


@pytest.mark.parametrize("name", EXPECTED_CAPS)
def test_probes_find_what_the_family_refuses(name: str) -> None:
    if name not in TEMPLATES:
        pytest.skip(f"{name} is not among this version's templates")
    caps = templates(name).template_for(ChatRequest(messages=[USER])).caps
    assert replace(NO_POLYFILLS, **EXPECTED_CAPS[name]) == caps


# Reasoning formats found on real templates whose models open their thinking some other way
# than the generation prompt opening a tag: an empty block before earlier answers (the model
# writes the tags itself), and plain phrases around the reasoning.
REASONING_SHAPES: dict[str, tuple[str, str, bool]] = {
    "Kimi-K2-Thinking": ("<think>", "</think>", False),
    "Apriel-1.6-15b-Thinker-fixed": (
        "Here are my reasoning steps:",
        "[BEGIN FINAL RESPONSE]",
        True,
    ),
    "Qwen-QwQ-32B": ("<think>", "</think>", True),
}
NOT_REASONING = ("muse-glimmer", "meta-llama-Llama-3.1-8B-Instruct", "google-gemma-2-2b-it")


@pytest.mark.parametrize("name", list(REASONING_SHAPES))
def test_reasoning_shapes_are_detected(name: str) -> None:
    format = detect_reasoning(renderer(name))
    assert format is not None
    assert (format.start, format.end, format.starts_inside) == REASONING_SHAPES[name]


@pytest.mark.parametrize("name", NOT_REASONING)
def test_templates_without_a_reasoning_format_get_none(name: str) -> None:
    assert detect_reasoning(renderer(name)) is None
