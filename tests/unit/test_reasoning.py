"""Reasoning formats: detection by rendering probe conversations, and splitting of output.

The templates (``tests/builders/reasoning_templates.py``) are written in the style of each
family's published chat template and rendered by the package's own sandboxed Jinja renderer
behind the public ``ScriptedEngine``. The recorded outputs are literal strings shaped like what
those models write; each is split whole, fed one character at a time and fed in random pieces,
and the three must agree.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamacpp_integrations.engine import ChatRequest
from llamacpp_integrations.errors import ChatTemplateError
from llamacpp_integrations.prompts.reasoning import (
    ReasoningFormat,
    ReasoningSplitter,
    split_reasoning,
    template_kwargs_for,
)
from llamacpp_integrations.testing import SCRIPTED_INFO, ScriptedEngine
from llamacpp_integrations.tools import detect_reasoning
from tests.builders.reasoning_templates import (
    CHATML,
    DETECTED,
    GPT_OSS,
    GPT_OSS_FORMAT,
    HYBRID_FORMAT,
    QWEN3,
    QWEN3_FORMAT,
    R1_FORMAT,
    THREE_WAY_FORMAT,
)


def engine_for(source: str | None) -> ScriptedEngine:
    """Just enough of an engine for the probes: chat requests rendered with ``source``."""
    return ScriptedEngine(info=replace(SCRIPTED_INFO, chat_template=source))


def render(source: str, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    return engine_for(source).render_chat(ChatRequest(messages=messages, template_kwargs=kwargs))


@pytest.mark.parametrize(("source", "expected"), DETECTED.values(), ids=DETECTED.keys())
def test_detects_each_family(source: str, expected: ReasoningFormat | None) -> None:
    assert detect_reasoning(engine_for(source)) == expected


@pytest.mark.parametrize(("source", "expected"), DETECTED.values(), ids=DETECTED.keys())
def test_detects_a_template_given_per_request(source: str, expected: object) -> None:
    engine = engine_for(CHATML)
    assert detect_reasoning(engine, source) == expected
    assert engine.rendered and all(r.chat_template == source for r in engine.rendered)


def test_no_template_at_all_is_the_callers_problem() -> None:
    with pytest.raises(ChatTemplateError):
        detect_reasoning(engine_for(None))


def test_probes_read_rendering_not_template_text() -> None:
    # The same family behind an unrelated-looking template: detection keys on what renders.
    renamed = QWEN3.replace("<|im_start|>", "<|turn|>").replace("<|im_end|>", "<|/turn|>")
    assert detect_reasoning(engine_for(renamed)) == QWEN3_FORMAT


def test_a_think_tag_only_in_the_system_text_is_not_reasoning() -> None:
    talkative = CHATML.replace("You are a helpful AI assistant.", "Never write <think> tags.")
    assert detect_reasoning(engine_for(talkative)) is None


# -- the switch ----------------------------------------------------------------------------------


def test_template_kwargs_turn_the_switch() -> None:
    assert template_kwargs_for(QWEN3_FORMAT, True) == {"enable_thinking": True}
    assert template_kwargs_for(QWEN3_FORMAT, False) == {"enable_thinking": False}
    assert template_kwargs_for(QWEN3_FORMAT, None) == {}
    assert template_kwargs_for(HYBRID_FORMAT, True) == {"thinking": True}
    assert template_kwargs_for(R1_FORMAT, False) == {}
    assert template_kwargs_for(GPT_OSS_FORMAT, True) == {}


def test_switch_off_closes_an_empty_reasoning_block_in_the_prompt() -> None:
    question = [{"role": "user", "content": "Hi"}]
    off = render(QWEN3, question, **template_kwargs_for(QWEN3_FORMAT, False))
    on = render(QWEN3, question, **template_kwargs_for(QWEN3_FORMAT, True))
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("<|im_start|>assistant\n")
    assert render(QWEN3, question) == on


def test_reasoning_given_back_renders_where_the_format_says() -> None:
    turns = [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "5", QWEN3_FORMAT.history_field: "Adding: 5."},
    ]
    assert "<think>\nAdding: 5.\n</think>\n\n5" in render(QWEN3, turns)
    turns[1] = {"role": "assistant", "content": "5", GPT_OSS_FORMAT.history_field: "Adding: 5."}
    assert "<|channel|>analysis<|message|>Adding: 5.<|end|>" in engine_for(GPT_OSS).render_chat(
        ChatRequest(messages=turns, add_generation_prompt=False)
    )


# -- splitting recorded outputs ------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    format: ReasoningFormat
    text: str
    reasoning: str
    answer: str
    switch: bool | None = None  # the request's reasoning switch, if it set one


QWEN3_THOUGHT = (
    'Okay, the user asks how many r\'s are in "strawberry".\n'
    "Let me spell it: s-t-r-a-w-b-e-r-r-y.\n\n"
    "Positions 3, 8 and 9 are r's, so 3 < 4 and the count is 3."
)
R1_THOUGHT = (
    "Alright, so I need to find the sum of 17 and 25.\n\n"
    "17 + 25: 7 + 5 = 12, write 2 carry 1; 1 + 2 + 1 = 4. So 42.\n\n"
    "Wait, let me double-check: 42 - 25 = 17. Yes."
)

RECORDED: dict[str, Recorded] = {
    "qwen3-thinks-then-answers": Recorded(
        QWEN3_FORMAT,
        f'<think>\n{QWEN3_THOUGHT}\n</think>\n\nThere are **3** r\'s in "strawberry".',
        QWEN3_THOUGHT,
        'There are **3** r\'s in "strawberry".',
    ),
    "qwen3-empty-thinking": Recorded(
        QWEN3_FORMAT, "<think>\n\n</think>\n\nHello! How can I help?", "", "Hello! How can I help?"
    ),
    "qwen3-switched-off": Recorded(
        QWEN3_FORMAT,
        "Paris is the capital of France.\n",
        "",
        "Paris is the capital of France.\n",
        switch=False,
    ),
    "qwen3-skips-thinking": Recorded(
        QWEN3_FORMAT, "\n\nSure: `a < b` is true.", "", "Sure: `a < b` is true."
    ),
    "qwen3-answer-opens-with-a-tag": Recorded(
        QWEN3_FORMAT,
        "<b>Bold</b> claims need <thin> evidence.",
        "",
        "<b>Bold</b> claims need <thin> evidence.",
    ),
    "qwen3-cut-inside-thinking": Recorded(
        QWEN3_FORMAT,
        "<think>\nLet me list the primes below 20: 2, 3, 5, 7, 11, 13, ",
        "Let me list the primes below 20: 2, 3, 5, 7, 11, 13,",
        "",
    ),
    "qwen3-cut-inside-the-end-marker": Recorded(
        QWEN3_FORMAT, "<think>\nNearly done.\n</thi", "Nearly done.\n</thi", ""
    ),
    "qwen3-angle-brackets-that-are-not-markers": Recorded(
        QWEN3_FORMAT,
        "<think>\nIn HTML, <div> and </div> wrap; x<y and </ think> or </thinking> are no end.\n"
        "</think>\n\nUse `<` for less-than; a <think> tag in the answer stays text.",
        "In HTML, <div> and </div> wrap; x<y and </ think> or </thinking> are no end.",
        "Use `<` for less-than; a <think> tag in the answer stays text.",
    ),
    "r1-thinks-then-answers": Recorded(
        R1_FORMAT,
        f"{R1_THOUGHT}\n</think>\n\nThe sum is **42**.\n\n\\boxed{{42}}",
        R1_THOUGHT,
        "The sum is **42**.\n\n\\boxed{42}",
    ),
    "r1-writes-the-open-tag-again": Recorded(
        R1_FORMAT, "<think>\nHmm, trivial.\n</think>\nYes.", "Hmm, trivial.", "Yes."
    ),
    "r1-cut-by-max-tokens": Recorded(
        R1_FORMAT,
        "Okay, let's see. The user wants a poem about <angle> brackets.\nFirst line: ",
        "Okay, let's see. The user wants a poem about <angle> brackets.\nFirst line:",
        "",
    ),
    "r1-reasoning-that-starts-with-a-bracket": Recorded(
        R1_FORMAT,
        "<thought experiment> suppose x = 1.</think>So x = 1.",
        "<thought experiment> suppose x = 1.",
        "So x = 1.",
    ),
    "qwq-thinks-then-answers": Recorded(
        R1_FORMAT,
        "Let me think. </th is not it, nor </think >.\n\nSo: blue.\n</think>\n\n"
        "The sky looks blue because of Rayleigh scattering.",
        "Let me think. </th is not it, nor </think >.\n\nSo: blue.",
        "The sky looks blue because of Rayleigh scattering.",
    ),
    "hybrid-off-by-default": Recorded(
        HYBRID_FORMAT, "Hello! I am here to help.", "", "Hello! I am here to help."
    ),
    "hybrid-switched-on": Recorded(
        HYBRID_FORMAT,
        "The user greets me.</think>Hello! I am here to help.",
        "The user greets me.",
        "Hello! I am here to help.",
        switch=True,
    ),
    "gpt-oss-analysis-then-final": Recorded(
        GPT_OSS_FORMAT,
        '<|channel|>analysis<|message|>User asks: "What is 2+2?" Simple: 4. '
        "Check a <| b is no token.<|end|><|start|>assistant<|channel|>final<|message|>"
        "2 + 2 = **4**.<|return|>",
        'User asks: "What is 2+2?" Simple: 4. Check a <| b is no token.',
        "2 + 2 = **4**.",
    ),
    "gpt-oss-stopped-before-return": Recorded(
        GPT_OSS_FORMAT,
        "<|channel|>analysis<|message|>Need a greeting.\nKeep it short.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hi there!\n",
        "Need a greeting.\nKeep it short.",
        "Hi there!\n",
    ),
    "gpt-oss-final-only": Recorded(
        GPT_OSS_FORMAT, "<|channel|>final<|message|>Hello.", "", "Hello."
    ),
    "gpt-oss-cut-inside-analysis": Recorded(
        GPT_OSS_FORMAT,
        "<|channel|>analysis<|message|>We need to compare <|end and <|start tokens",
        "We need to compare <|end and <|start tokens",
        "",
    ),
    "gpt-oss-cut-inside-a-header": Recorded(
        GPT_OSS_FORMAT,
        "<|channel|>analysis<|message|>Done thinking.<|end|><|start|>assistant<|channel|>fin",
        "Done thinking.",
        "",
    ),
    "gpt-oss-tool-call-on-commentary": Recorded(
        GPT_OSS_FORMAT,
        "<|channel|>analysis<|message|>Need the weather; call get_weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Paris"}<|call|>',
        "Need the weather; call get_weather.",
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Paris"}<|call|>',
    ),
    "gpt-oss-two-analysis-messages": Recorded(
        GPT_OSS_FORMAT,
        "<|channel|>analysis<|message|>First thought. <|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>Second.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Answer.",
        "First thought. Second.",
        "Answer.",
    ),
    "gpt-oss-ignoring-the-format": Recorded(
        GPT_OSS_FORMAT, "Plain text, <| not framing.", "", "Plain text, <| not framing."
    ),
}


def feed_pieces(case: Recorded, pieces: list[str]) -> tuple[str, str]:
    """Feed ``pieces``; check the deltas add up to the splitter's totals at every step."""
    splitter = ReasoningSplitter(case.format, reasoning=case.switch)
    reasoning = answer = ""
    for piece in pieces:
        r, a = splitter.feed(piece)
        reasoning, answer = reasoning + r, answer + a
        assert (splitter.reasoning, splitter.answer) == (reasoning, answer)
        if answer and case.format.family == "think-tags":
            assert splitter.reasoning_done
    r, a = splitter.finish()
    assert splitter.reasoning_done
    assert (splitter.reasoning, splitter.answer) == (reasoning + r, answer + a)
    return reasoning + r, answer + a


@pytest.mark.parametrize("case", RECORDED.values(), ids=RECORDED.keys())
def test_recorded_output_splits(case: Recorded) -> None:
    expected = (case.reasoning, case.answer)
    assert split_reasoning(case.format, case.text, reasoning=case.switch) == expected
    assert feed_pieces(case, [case.text]) == expected


@pytest.mark.parametrize("case", RECORDED.values(), ids=RECORDED.keys())
def test_recorded_output_fed_char_by_char(case: Recorded) -> None:
    assert feed_pieces(case, list(case.text)) == (case.reasoning, case.answer)


@pytest.mark.parametrize("case", RECORDED.values(), ids=RECORDED.keys())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_recorded_output_fed_in_random_pieces(case: Recorded, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(case.text)), max_size=10), label="cuts"))
    bounds = [0, *cuts, len(case.text)]
    pieces = [case.text[a:b] for a, b in itertools.pairwise(bounds)]
    assert feed_pieces(case, pieces) == (case.reasoning, case.answer)


# -- streaming promises --------------------------------------------------------------------------


def test_only_a_possible_marker_start_is_held_back() -> None:
    splitter = ReasoningSplitter(QWEN3_FORMAT)
    assert splitter.feed("<thi") == ("", "")
    assert splitter.feed("nk>\nStep one") == ("Step one", "")
    assert splitter.feed(" </th") == ("", "")  # the blank may end the reasoning: it waits too
    assert splitter.feed("ere") == (" </there", "")
    assert not splitter.reasoning_done
    assert splitter.feed("\n</think>\n\n") == ("", "")
    assert splitter.reasoning_done
    assert splitter.feed("Done <") == ("", "Done <")
    assert splitter.finish() == ("", "")
    assert (splitter.reasoning, splitter.answer) == ("Step one </there", "Done <")


def test_answer_without_thinking_is_known_at_its_first_letter() -> None:
    splitter = ReasoningSplitter(QWEN3_FORMAT)
    assert splitter.feed("\n<") == ("", "")
    assert splitter.feed("p>") == ("", "<p>")
    assert splitter.reasoning_done


def test_gpt_oss_framing_is_held_back_and_dropped() -> None:
    splitter = ReasoningSplitter(GPT_OSS_FORMAT)
    assert splitter.feed("<|channel|>analysis<|mess") == ("", "")
    assert splitter.feed("age|>Think<|en") == ("Think", "")
    assert splitter.feed("d|><|start|>assistant<|channel|>final<|message|>Hi") == ("", "Hi")
    assert splitter.reasoning_done


def test_switch_of_the_request_decides_where_output_starts() -> None:
    text = "Greeting.</think>Hello."
    assert split_reasoning(HYBRID_FORMAT, text) == ("", text)
    assert split_reasoning(HYBRID_FORMAT, text, reasoning=True) == ("Greeting.", "Hello.")
    # Unset, this template's prompt opens nothing: the model may still open the tag itself.
    assert split_reasoning(THREE_WAY_FORMAT, "Hi.") == ("", "Hi.")
    assert split_reasoning(THREE_WAY_FORMAT, "<think>Hm.</think>Hi.") == ("Hm.", "Hi.")
    assert split_reasoning(THREE_WAY_FORMAT, text, reasoning=True) == ("Greeting.", "Hello.")
    assert split_reasoning(THREE_WAY_FORMAT, "Hi.", reasoning=False) == ("", "Hi.")
    # A template without a switch cannot turn reasoning off: its prompt still opens it.
    assert split_reasoning(R1_FORMAT, text, reasoning=False) == ("Greeting.", "Hello.")


def test_finished_splitter_takes_no_more_text() -> None:
    splitter = ReasoningSplitter(R1_FORMAT)
    splitter.finish("x</think>y")
    with pytest.raises(ValueError):
        splitter.feed("z")
    with pytest.raises(ValueError):
        splitter.finish()


# -- properties ----------------------------------------------------------------------------------

# Text made of marker fragments, so that random outputs come close to markers often.
FRAGMENTS = st.sampled_from(
    ["<", ">", "/", "|", "think", "</think>", "<think>", "<|", "|>", "end", "start",
     "channel", "message", "final", "analysis", "<|end|>", "<|start|>", "<|channel|>",
     "<|message|>", "assistant", " ", "\n", "a", "é", "."]
)  # fmt: skip
TEXTS = st.lists(FRAGMENTS, max_size=30).map("".join)


def without(text: str, markers: tuple[str, ...]) -> str:
    """``text`` with every marker taken out, including ones the taking out creates."""
    while any(marker in text for marker in markers):
        for marker in markers:
            text = text.replace(marker, "")
    return text


FORMATS = [QWEN3_FORMAT, R1_FORMAT, HYBRID_FORMAT, GPT_OSS_FORMAT]


@pytest.mark.parametrize("fmt", FORMATS, ids=["qwen3", "r1", "hybrid", "gpt-oss"])
@settings(max_examples=300, deadline=None)
@given(text=TEXTS, data=st.data())
def test_any_output_streams_as_it_splits(fmt: ReasoningFormat, text: str, data: Any) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=10), label="cuts"))
    bounds = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    case = Recorded(fmt, text, "", "")
    assert feed_pieces(case, pieces) == split_reasoning(fmt, text)
    assert feed_pieces(case, list(text)) == split_reasoning(fmt, text)


@settings(max_examples=300, deadline=None)
@given(reasoning=TEXTS, answer=TEXTS)
def test_think_tags_give_back_what_was_written(reasoning: str, answer: str) -> None:
    reasoning = without(reasoning, ("</think>",))
    text = f"<think>\n{reasoning}\n</think>\n\n{answer}"
    expected = (reasoning.strip(), answer.lstrip())
    assert split_reasoning(QWEN3_FORMAT, text) == expected
    # Where the prompt opened the reasoning, a start tag at its very start counts as repeated.
    if not reasoning.lstrip().startswith("<think>"):
        assert split_reasoning(R1_FORMAT, text[len("<think>") :]) == expected


@settings(max_examples=300, deadline=None)
@given(reasoning=TEXTS, answer=TEXTS)
def test_harmony_gives_back_what_was_written(reasoning: str, answer: str) -> None:
    stops = ("<|end|>", "<|return|>", "<|call|>", "<|start|>")
    reasoning, answer = without(reasoning, stops), without(answer, stops)
    text = (
        f"<|channel|>analysis<|message|>{reasoning}<|end|>"
        f"<|start|>assistant<|channel|>final<|message|>{answer}<|return|>"
    )
    assert split_reasoning(GPT_OSS_FORMAT, text) == (reasoning, answer)
