"""Polyfills: what a template refuses is probed once, and only that is adapted.

Each case is a small template written to refuse one thing the way a published family does
(Gemma 2 a system message, Mistral two user turns in a row, functionary object arguments...);
the real templates are covered by ``tests/conformance/test_render.py``.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from datetime import datetime
from typing import Any

import pytest

from llamacpp_integrations.errors import ChatTemplateError
from llamacpp_integrations.prompts import chat_template as chat_template_module
from llamacpp_integrations.prompts.chat_template import ChatTemplate
from llamacpp_integrations.prompts.polyfills import adapt_messages, template_variables
from llamacpp_integrations.prompts.template_caps import NO_POLYFILLS, TemplateCaps, probe_caps

PLAIN = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments|tojson }}]"
    "{% endfor %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
NO_SYSTEM = (
    "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}" + PLAIN
)
# Mistral's check: user and plain assistant turns alternate; calls and results are skipped.
ALTERNATING = (
    "{% set ns = namespace(i=0) %}{% for m in messages if m.role != 'system' %}"
    "{% if not (m.role == 'tool' or m.tool_calls) %}"
    "{% if (m.role == 'user') != (ns.i % 2 == 0) %}{{ raise_exception('roles must alternate') }}"
    "{% endif %}{% set ns.i = ns.i + 1 %}{% endif %}{% endfor %}" + PLAIN
)
# Ministral 3's: and an assistant turn must say something.
ALTERNATING_NOT_EMPTY = (
    "{% for m in messages %}{% if m.role == 'assistant' and not m.content and not m.tool_calls %}"
    "{{ raise_exception('Assistant message must have content') }}{% endif %}{% endfor %}"
    + ALTERNATING
)
STRING_ARGUMENTS = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}{{ '>>>' + c.function.name + '\\n' + c.function.arguments }}"
    "{% endfor %}{% endfor %}"
)
NO_TOOL_ROLE = (
    "{% for m in messages %}{% if m.role in ('system', 'user', 'assistant') %}"
    "<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}"
)
TYPED_ONLY = (
    "{% for m in messages %}<{{ m.role }}>{% for part in m.content if part.type == 'text' %}"
    "{{ part.text }}{% endfor %}{% endfor %}"
)
DESCRIBED = (
    "{% for t in tools or [] %}{{ t.function.name }}("
    "{% for name, field in t.function.parameters.properties|items %}"
    "{{ name + ': ' + field.description }}{% endfor %}){% endfor %}" + PLAIN
)

ALTERNATING_LOOP = (
    "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate') }}{% endif %}{% endfor %}"
    "{% for m in messages %}"
)

SYSTEM: dict[str, Any] = {"role": "system", "content": "Be brief."}
USER: dict[str, Any] = {"role": "user", "content": "Weather in Paris?"}
CALL: dict[str, Any] = {
    "id": "call0pari",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
}
CALLING: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [CALL]}
RESULT: dict[str, Any] = {"role": "tool", "tool_call_id": "call0pari", "content": "21 C"}
FOLLOW_UP: dict[str, Any] = {"role": "user", "content": "And in Rome?"}
TOOL_HISTORY: list[dict[str, Any]] = [SYSTEM, USER, CALLING, RESULT, FOLLOW_UP]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def template(source: str) -> ChatTemplate:
    return ChatTemplate(source, bos_token="", eos_token="")


# -- templates that need nothing get exactly what they render ------------------------------------


@pytest.mark.parametrize(
    "messages",
    [[USER], [SYSTEM, USER], [SYSTEM, USER, CALLING, RESULT, FOLLOW_UP], [USER, USER]],
)
def test_a_template_that_needs_nothing_renders_exactly(messages: list[dict[str, Any]]) -> None:
    plain = template(PLAIN)
    assert plain.caps == NO_POLYFILLS
    assert plain.render(messages, tools=TOOLS) == plain.render_exact(messages, tools=TOOLS)


def test_nothing_given_is_changed() -> None:
    history = copy.deepcopy(TOOL_HISTORY)
    for source in (NO_SYSTEM, ALTERNATING_NOT_EMPTY, STRING_ARGUMENTS, NO_TOOL_ROLE, TYPED_ONLY):
        template(source).render(history)
    assert history == TOOL_HISTORY


# -- each polyfill -------------------------------------------------------------------------------


def test_refused_system_message_is_folded_into_the_next_user_turn() -> None:
    gemma = template(NO_SYSTEM)
    assert not gemma.caps.system_role
    with pytest.raises(ChatTemplateError, match="System role"):
        gemma.render_exact([SYSTEM, USER])
    assert gemma.render([SYSTEM, USER]) == "<user>Be brief.\n\nWeather in Paris?<assistant>"
    assert gemma.render([USER]) == "<user>Weather in Paris?<assistant>"


def test_system_message_with_no_user_turn_after_it_becomes_one() -> None:
    assert template(NO_SYSTEM).render([SYSTEM]) == "<user>Be brief.<assistant>"


def test_strict_alternation_merges_turns_of_one_role() -> None:
    strict = template(ALTERNATING)
    assert strict.caps.strict_alternation
    out = strict.render([USER, FOLLOW_UP, {"role": "assistant", "content": "a"}, CALLING])
    assert out.startswith("<user>Weather in Paris?\n\nAnd in Rome?<assistant>a<assistant>")


def test_user_turn_after_tool_results_gets_an_empty_answer_before_it() -> None:
    strict = template(ALTERNATING)
    assert strict.caps.tool_answer_bridge == ""
    with pytest.raises(ChatTemplateError, match="alternate"):
        strict.render_exact(TOOL_HISTORY)
    out = strict.render(TOOL_HISTORY)
    assert "<tool>21 C<assistant><user>And in Rome?<assistant>" in out
    # Results that end the conversation need no answer: the model gives it.
    assert strict.render(TOOL_HISTORY[:-1]).endswith("<tool>21 C<assistant>")


def test_template_refusing_empty_turns_gets_a_space() -> None:
    strict = template(ALTERNATING_NOT_EMPTY)
    assert strict.caps.tool_answer_bridge == " "
    assert "<tool>21 C<assistant> <user>And in Rome?" in strict.render(TOOL_HISTORY)


def test_arguments_become_a_json_string_where_objects_are_refused() -> None:
    functionary = template(STRING_ARGUMENTS)
    assert functionary.caps.string_arguments
    assert '>>>get_weather\n{"city": "Paris"}' in functionary.render([USER, CALLING])
    # Arguments already given as a string stay as they are.
    given = copy.deepcopy(CALLING)
    given["tool_calls"][0]["function"]["arguments"] = '{"city":"Paris"}'
    assert '>>>get_weather\n{"city":"Paris"}' in functionary.render([USER, given])


def test_tool_results_become_user_turns_where_the_template_drops_them() -> None:
    phi = template(NO_TOOL_ROLE)
    assert not phi.caps.tool_role
    result = {"name": "get_weather", "content": "21 C"}  # named after the call it answers
    expected = f"<user><tool_response>\n{json.dumps(result)}\n</tool_response>"
    assert expected in phi.render(TOOL_HISTORY)


def test_string_content_becomes_a_text_part_where_only_parts_render() -> None:
    typed = template(TYPED_ONLY)
    assert typed.caps.typed_content
    assert typed.render([SYSTEM, USER]) == "<system>Be brief.<user>Weather in Paris?"


def test_undescribed_parameters_get_an_empty_description_where_required() -> None:
    cohere = template(DESCRIBED)
    assert cohere.caps.described_parameters
    assert cohere.render([USER], tools=TOOLS).startswith("get_weather(city: )")
    described = copy.deepcopy(TOOLS)
    described[0]["function"]["parameters"]["properties"]["city"]["description"] = "A city."
    assert cohere.render([USER], tools=described).startswith("get_weather(city: A city.)")


def test_gemma_like_template_takes_the_whole_tool_history() -> None:
    # No system role, no tool role, strict alternation: every polyfill at once.
    gemma = template(NO_SYSTEM.replace("{% for m in messages %}", ALTERNATING_LOOP))
    caps = gemma.caps
    assert (caps.system_role, caps.tool_role, caps.strict_alternation) == (False, False, True)
    out = gemma.render(TOOL_HISTORY)
    assert out.startswith("<user>Be brief.\n\nWeather in Paris?<assistant>")
    assert out.endswith("</tool_response>\n\nAnd in Rome?<assistant>")


def test_polyfills_compose_without_templates() -> None:
    caps = TemplateCaps(system_role=False, strict_alternation=True)
    out = adapt_messages(caps, [SYSTEM, SYSTEM, USER, FOLLOW_UP])
    text = "Be brief.\n\nBe brief.\n\nWeather in Paris?\n\nAnd in Rome?"
    assert out == [{"role": "user", "content": text}]


# -- probed once ---------------------------------------------------------------------------------


def test_caps_are_probed_once_per_template(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def counting(render: Any, budget: float) -> TemplateCaps:
        calls.append(1)
        return probe_caps(render, budget)

    monkeypatch.setattr(chat_template_module, "probe_caps", counting)
    gemma = template(NO_SYSTEM)
    threads = [threading.Thread(target=gemma.render, args=([SYSTEM, USER],)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    gemma.render([USER])
    assert len(calls) == 1


# -- variables -----------------------------------------------------------------------------------


def test_only_the_variables_a_template_reads_are_set() -> None:
    assert template_variables(frozenset({"messages", "tools"}), TOOLS) == {}
    today = datetime.now()
    variables = template_variables({"date_string", "current_date"}, None)
    assert variables["date_string"] == today.strftime("%d %b %Y")
    assert variables["current_date"] == today.strftime("%Y-%m-%d")


def test_llama_date_string_is_today_unless_the_caller_sets_it() -> None:
    llama = template(
        '{% if not date_string is defined %}{% set date_string = "26 Jul 2024" %}{% endif %}'
        "Today Date: {{ date_string }}"
    )
    assert llama.reads >= {"date_string"}
    assert llama.render([USER]) == f"Today Date: {datetime.now().strftime('%d %b %Y')}"
    assert llama.render([USER], date_string="01 Jan 2025") == "Today Date: 01 Jan 2025"


def test_firefunction_functions_and_datetime() -> None:
    fire = template("{{ '\\n' + functions }}|Today is {{ datetime }}.")
    out = fire.render([USER], tools=TOOLS)
    assert out.startswith("\n" + json.dumps(TOOLS, indent=2) + "|Today is ")
    assert fire.render([USER]).startswith("\n|Today is ")


def test_probes_share_one_time_budget() -> None:
    # A template that never ends once a tool result is in the conversation: the probes spend
    # one render time limit in all, and what they could not try is left as it is.
    slow = (
        "{% for m in messages %}{% if m.role == 'tool' %}{% for i in range(99999) %}"
        "{% for j in range(99999) %}{% endfor %}{% endfor %}{% endif %}{% endfor %}" + PLAIN
    )
    stuck = ChatTemplate(slow, bos_token="", eos_token="", render_time_limit=0.3)
    start = time.monotonic()
    assert stuck.caps == NO_POLYFILLS
    assert time.monotonic() - start < 1.5
    assert stuck.render([USER]) == "<user>Weather in Paris?<assistant>"
