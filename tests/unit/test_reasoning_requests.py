"""A reasoning model's requests: the template's switch and history, grammars and lazy triggers
that wait for the end of the thinking, the continuation after it, and how a call is planned.

The splitting itself is ``test_reasoning.py``; running all of it on a model is
``tests/integration/test_reasoning.py``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from llamacpp_integrations.client import CallOptions
from llamacpp_integrations.client.plan import plan_call
from llamacpp_integrations.engine import ChatMessage, ChatRequest, InferenceEngine, ReasoningSpec
from llamacpp_integrations.errors import InvalidRequestError
from llamacpp_integrations.prompts.chat_rendering import ChatTemplates, template_inputs
from llamacpp_integrations.prompts.reasoning import ReasoningFormat, ReasoningSplitter, forced_end
from llamacpp_integrations.tools import (
    HERMES,
    TemplateToolSupport,
    answer_grammar,
    answer_trigger_prefix,
    constrain,
    written_reasoning,
)
from tests.builders.reasoning_templates import (
    GPT_OSS,
    GPT_OSS_FORMAT,
    QWEN3,
    QWEN3_FORMAT,
    QWQ,
    R1_FORMAT,
)

QUESTION = ChatMessage(role="user", content="2+2?")
EARLIER = ChatMessage(role="assistant", content="It is 4.", reasoning="two plus two")


# -- the template's switch and history -----------------------------------------------------------


@pytest.mark.parametrize(
    ("enabled", "expected"),
    [(None, {"other": 1}), (False, {"other": 1, "enable_thinking": False})],
)
def test_the_switch_is_set_only_as_asked(enabled: bool | None, expected: dict[str, Any]) -> None:
    spec = ReasoningSpec(QWEN3_FORMAT, enabled=enabled)
    request = ChatRequest(messages=[QUESTION], template_kwargs={"other": 1}, reasoning=spec)
    assert template_inputs(request)[1] == expected


@pytest.mark.parametrize(
    ("format", "field"),
    [(QWEN3_FORMAT, "reasoning_content"), (GPT_OSS_FORMAT, "thinking"), (R1_FORMAT, None)],
    ids=["qwen3", "gpt-oss", "r1"],
)
def test_earlier_reasoning_goes_where_the_template_reads_it(
    format: ReasoningFormat, field: str | None
) -> None:
    request = ChatRequest(messages=[QUESTION, EARLIER], reasoning=ReasoningSpec(format))
    messages, _ = template_inputs(request)
    keys = set(messages[1]) - {"role", "content"}
    assert keys == (set() if field is None else {field})
    if field is not None:
        assert messages[1][field] == "two plus two"


def test_without_a_reasoning_format_the_message_is_passed_as_given() -> None:
    messages, _ = template_inputs(ChatRequest(messages=[QUESTION, EARLIER]))
    assert messages[1]["reasoning_content"] == "two plus two"


@pytest.mark.parametrize(("template", "format"), [(QWEN3, QWEN3_FORMAT), (GPT_OSS, GPT_OSS_FORMAT)])
def test_earlier_reasoning_is_rendered_by_templates_that_give_it_back(
    template: str, format: ReasoningFormat
) -> None:
    # Both keep the reasoning of the turn the conversation ends on (a tool loop's).
    request = ChatRequest(
        messages=[QUESTION, EARLIER], reasoning=ReasoningSpec(format), add_generation_prompt=False
    )
    assert "two plus two" in ChatTemplates(template).render_chat(request)


def test_a_negative_budget_is_refused() -> None:
    request = ChatRequest(messages=[QUESTION], reasoning=ReasoningSpec(R1_FORMAT, budget=-1))
    with pytest.raises(InvalidRequestError, match="budget"):
        request.validate_common(1000)


# -- the splitter's state, which the engine counts reasoning tokens by ---------------------------


def test_state_follows_the_output() -> None:
    splitter = ReasoningSplitter(QWEN3_FORMAT)
    states = []
    for piece in ["\n", "<th", "ink>", "hm", "</think>", "Hi"]:
        splitter.feed(piece)
        states.append(splitter.state)
    assert states == [
        "undecided",
        "undecided",
        "reasoning",
        "reasoning",
        "answer",
        "answer",
    ]
    skipped = ReasoningSplitter(QWEN3_FORMAT)
    skipped.feed("Hi")
    assert skipped.state == "answer"
    inside = ReasoningSplitter(R1_FORMAT)
    inside.feed("hm")
    assert inside.state == "reasoning"


def test_harmony_state_is_undecided_between_messages() -> None:
    splitter = ReasoningSplitter(GPT_OSS_FORMAT)
    splitter.feed("<|channel|>analysis<|message|>hm")
    assert splitter.state == "reasoning"
    splitter.feed("<|end|>")
    assert splitter.state == "undecided"
    splitter.feed("<|start|>assistant<|channel|>final<|message|>Hi")
    assert splitter.state == "answer"


# -- grammars and triggers after the thinking ----------------------------------------------------

JSON_GRAMMAR = 'root ::= "{" ws "}"\nws ::= [ \\t\\n]*'


@pytest.mark.parametrize("format", [QWEN3_FORMAT, R1_FORMAT, GPT_OSS_FORMAT], ids=str)
def test_answer_grammar_wraps_the_answer_and_keeps_its_rules(format: ReasoningFormat) -> None:
    grammar = answer_grammar(ReasoningSpec(format), JSON_GRAMMAR)
    assert grammar.startswith("root ::= ")
    assert "ws ::= [ \\t\\n]*" in grammar
    assert format.end.replace('"', '\\"') in grammar
    # Every rule is defined once.
    names = re.findall(r"^([A-Za-z0-9-]+) ::=", grammar, re.MULTILINE)
    assert len(names) == len(set(names))


def test_no_wrapping_when_the_switch_is_off() -> None:
    assert answer_grammar(ReasoningSpec(QWEN3_FORMAT, enabled=False), JSON_GRAMMAR) == JSON_GRAMMAR
    assert answer_trigger_prefix(ReasoningSpec(QWEN3_FORMAT, enabled=False)) == ""


def _trigger(spec: ReasoningSpec) -> re.Pattern[str]:
    (pattern,) = HERMES.trigger_patterns(answer_trigger_prefix(spec))
    return re.compile(pattern)


def test_a_call_written_while_thinking_does_not_trigger() -> None:
    trigger = _trigger(ReasoningSpec(QWEN3_FORMAT))
    assert trigger.fullmatch("<think>maybe <tool_call> here") is None
    match = trigger.fullmatch('<think>maybe <tool_call> here</think>\n\n<tool_call>{"na')
    assert match is not None and match.group(1) == '<tool_call>{"na'
    # A model that skips thinking calls at once.
    skipped = trigger.fullmatch('<tool_call>{"na')
    assert skipped is not None and skipped.group(1) == '<tool_call>{"na'


def test_inside_the_thinking_from_the_start_the_trigger_waits_for_its_end() -> None:
    trigger = _trigger(ReasoningSpec(R1_FORMAT))
    assert trigger.fullmatch("so <tool_call> then") is None
    match = trigger.fullmatch("so <tool_call> then</think>\n<tool_call>{")
    assert match is not None and match.group(1) == "<tool_call>{"


def test_structured_requests_of_reasoning_models_wrap_their_grammar() -> None:
    spec = ReasoningSpec(R1_FORMAT)
    request = constrain(ChatRequest(messages=[QUESTION], reasoning=spec, stop=["x"]), None)
    assert request.grammar is not None and "</think>" in request.grammar and request.stop == ()


# -- continuing after the thinking ---------------------------------------------------------------


def test_written_reasoning_is_what_the_model_wrote() -> None:
    assert written_reasoning(ReasoningSpec(R1_FORMAT), "hm") == "hm\n" + forced_end(R1_FORMAT)
    assert written_reasoning(ReasoningSpec(QWEN3_FORMAT), "hm") == (
        "<think>\nhm\n" + forced_end(QWEN3_FORMAT)
    )
    assert written_reasoning(ReasoningSpec(QWEN3_FORMAT), "") == ""
    harmony = written_reasoning(ReasoningSpec(GPT_OSS_FORMAT), "hm")
    assert harmony.startswith(GPT_OSS_FORMAT.start + "hm<|end|>")
    assert harmony.endswith(GPT_OSS_FORMAT.answer_start or "")


# -- planning a call -------------------------------------------------------------------------------


class Facts:
    def __init__(self, format: ReasoningFormat | None) -> None:
        self.format = format

    def tool_support(self, engine: InferenceEngine, chat_template: str | None) -> Any:
        return TemplateToolSupport(True, True, True, HERMES)

    def reasoning_format(
        self, engine: InferenceEngine, chat_template: str | None
    ) -> ReasoningFormat | None:
        return self.format


def _options(**kwargs: Any) -> CallOptions:
    return CallOptions.merge({}, kwargs, owner="test")


def test_a_call_names_the_templates_format_with_its_options() -> None:
    engine: Any = ChatTemplates(QWQ)
    request = ChatRequest(messages=[QUESTION])
    options = _options(reasoning=False, reasoning_budget=5)
    plan = plan_call(engine, request, options, Facts(R1_FORMAT))
    assert plan.request.reasoning == ReasoningSpec(R1_FORMAT, enabled=False, budget=5)
    plain = plan_call(engine, request, _options(reasoning_budget=5), Facts(None))
    assert plain.request.reasoning is None


def test_a_callers_grammar_applies_after_the_reasoning() -> None:
    engine: Any = ChatTemplates(QWQ)
    grammar = '# yes or no\nanswer ::= "yes" | "no" | "root"\nroot ::= answer " " answer'
    options = _options(grammar=grammar)
    request = replace(ChatRequest(messages=[QUESTION]), grammar=grammar)
    plan = plan_call(engine, request, options, Facts(R1_FORMAT))
    wrapped = plan.request.grammar
    assert wrapped is not None and wrapped.startswith("root ::= ")
    assert R1_FORMAT.end in wrapped  # the thinking comes first, closed by its end marker
    assert 'caller-root ::= answer " " answer' in wrapped and '"root"' in wrapped
    plain = plan_call(engine, request, options, Facts(None))
    assert plain.request.grammar == grammar  # no reasoning format: the grammar as given


# -- room for an answer the caller forces ----------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.mark.parametrize(
    "forcing",
    [
        {"tools": [WEATHER_TOOL], "tool_choice": "get_weather"},
        {"tools": [WEATHER_TOOL], "tool_choice": "any"},
        {"response_format": {"type": "json_object"}},
    ],
    ids=["named", "any", "structured"],
)
def test_a_forced_answer_keeps_room_after_the_thinking(forcing: dict[str, Any]) -> None:
    engine: Any = ChatTemplates(QWQ)
    request = ChatRequest(messages=[QUESTION], max_tokens=128)
    plan = plan_call(engine, request, _options(max_tokens=128, **forcing), Facts(R1_FORMAT))
    assert plan.request.reasoning is not None
    budget = plan.request.reasoning.budget
    assert budget is not None and 0 < budget <= 128 - 48  # the answer keeps its room


def test_nothing_forced_or_a_callers_budget_leaves_the_thinking_as_asked() -> None:
    engine: Any = ChatTemplates(QWQ)
    request = ChatRequest(messages=[QUESTION], max_tokens=128)
    auto = _options(max_tokens=128, tools=[WEATHER_TOOL], tool_choice="auto")
    assert plan_call(engine, request, auto, Facts(R1_FORMAT)).request.reasoning == ReasoningSpec(
        R1_FORMAT
    )
    own = _options(max_tokens=128, tools=[WEATHER_TOOL], tool_choice="any", reasoning_budget=90)
    reasoning = plan_call(engine, request, own, Facts(R1_FORMAT)).request.reasoning
    assert reasoning is not None and reasoning.budget == 90
    unlimited = _options(tools=[WEATHER_TOOL], tool_choice="any")
    reasoning = plan_call(
        engine, ChatRequest(messages=[QUESTION]), unlimited, Facts(R1_FORMAT)
    ).request.reasoning
    assert reasoning is not None and reasoning.budget is None  # no limit to divide


def test_a_template_that_thinks_only_when_asked_expects_no_reasoning_by_default() -> None:
    # rwkv-world, DeepSeek-V3.1: the default prompt opens no reasoning (or closes an empty one).
    off_by_default = replace(QWEN3_FORMAT, default_on=False)
    assert not ReasoningSpec(off_by_default).expected
    assert ReasoningSpec(off_by_default, enabled=True).expected
    assert answer_grammar(ReasoningSpec(off_by_default), JSON_GRAMMAR) == JSON_GRAMMAR
    assert ReasoningSpec(R1_FORMAT).expected  # no switch: it may always think
