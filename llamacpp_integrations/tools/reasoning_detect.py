"""Reasoning formats: which one a chat template uses, found by rendering probe conversations.

Reasoning models (Qwen3, DeepSeek-R1 distills, QwQ, gpt-oss...) write their thinking before
the answer, and the package keeps it out of answers. This module finds which
``engine.ReasoningFormat`` a template uses (:func:`detect_reasoning`), the way
``tool_prompt.detect_tool_support`` finds tool support: by rendering probe conversations
through the engine and reading the prompt text, never by template names. The engine splits
output by the format found.

Two families are known:

* ``think-tags``: the reasoning sits between ``<think>`` and ``</think>`` (or another tag
  named like it). Found from the generation prompt opening the tag (DeepSeek-R1 distills,
  QwQ), from a switch variable (Qwen3's ``enable_thinking``) whose "off" prompt closes an
  empty tag, from earlier reasoning rendered between the tags, or from the template cutting
  a tagged block out of an earlier answer.
* ``gpt-oss``: OpenAI's harmony format, where the answer's messages carry channels; found from
  an earlier answer being rendered as a ``final`` channel message. Its reasoning is the
  ``analysis`` channel.

A template showing neither gets ``None``: its output is not split at all.
"""

from __future__ import annotations

import re
from typing import Any

from ..engine import ChatRenderer, ChatRequest
from ..errors import ChatTemplateError, InvalidRequestError
from ..prompts.reasoning import HARMONY_CHANNEL, HARMONY_MESSAGE, HARMONY_START, ReasoningFormat

__all__ = ["detect_reasoning"]


# -- probes --------------------------------------------------------------------------------------

_QUESTION = "Probe question q4w."
_FOLLOW_UP = "Probe follow-up f2d."
_ANSWER = "probe_answer_a8m"
_REASONING = "probe_reasoning_r5n"
# Variables templates read to turn thinking on or off: Qwen3 and GLM-4.5 use the first (on
# unless passed false), DeepSeek-V3.1 the second (off unless passed true).
_SWITCHES = ("enable_thinking", "thinking")
# Where templates look for earlier reasoning: the OpenAI-compatible servers' field, then
# gpt-oss's own.
_HISTORY_FIELDS = ("reasoning_content", "thinking")
# A tag named like thinking: <think>, <thinking>, <seed:think>... Other tags (Gemma's
# <start_of_turn>) do not count.
_TAG = re.compile(r"<(/?)([A-Za-z_:]*think[A-Za-z_]*)>")
_OPENING_AT_END = re.compile(r"<([A-Za-z_:]*think[A-Za-z_]*)>\s*\Z")
_DEFAULT_TAGS = ("<think>", "</think>")
_HARMONY_TOKEN = re.compile(r"<\|[a-z_]+\|>")


def _render(
    engine: ChatRenderer,
    template: str | None,
    messages: list[dict[str, Any]],
    *,
    generation_prompt: bool = True,
    kwargs: dict[str, object] | None = None,
) -> str:
    # A probe the template refuses (raise_exception on an unexpected shape) shows nothing.
    try:
        return engine.render_chat(
            ChatRequest(
                messages=messages,
                chat_template=template,
                add_generation_prompt=generation_prompt,
                template_kwargs=kwargs or {},
            )
        )
    except (ChatTemplateError, InvalidRequestError):
        return ""


def _generation_prompt(
    engine: ChatRenderer, template: str | None, kwargs: dict[str, object]
) -> str:
    """What the template writes after a user turn for the model to answer."""
    turns = [{"role": "user", "content": _QUESTION}]
    prompted = _render(engine, template, turns, kwargs=kwargs)
    bare = _render(engine, template, turns, generation_prompt=False, kwargs=kwargs)
    if bare and prompted.startswith(bare):
        return prompted[len(bare) :]
    # The two renders differ earlier on (a date, a closing written only without the prompt):
    # what follows the question still holds the generation prompt.
    at = prompted.rfind(_QUESTION)
    return prompted[at + len(_QUESTION) :] if at >= 0 else ""


def _history(engine: ChatRenderer, template: str | None) -> tuple[str | None, str]:
    """The field an earlier turn's reasoning is rendered from (if any), and that rendering."""
    for field in _HISTORY_FIELDS:
        # The conversation ends on the answer: templates that give reasoning back keep it
        # there, where they may drop it from turns before the last question (Qwen3, gpt-oss).
        turns = [
            {"role": "user", "content": _QUESTION},
            {"role": "assistant", "content": _ANSWER, field: _REASONING},
        ]
        rendered = _render(engine, template, turns, generation_prompt=False)
        if _REASONING in rendered:
            return field, rendered
    return None, ""


def detect_reasoning(
    engine: ChatRenderer, chat_template: str | None = None
) -> ReasoningFormat | None:
    """Probe the template in effect (``chat_template`` or the model's) for a reasoning format.

    Returns ``None`` when no probe shows reasoning: the template's output is not split.

    Raises:
        ChatTemplateError: there is no template at all.
    """
    engine.render_chat(  # a template that cannot render a plain turn is the caller's problem
        ChatRequest(messages=[{"role": "user", "content": "x"}], chat_template=chat_template)
    )
    prompt = _generation_prompt(engine, chat_template, {})
    field, history = _history(engine, chat_template)
    return _harmony(engine, chat_template, prompt, field, history) or _think_tags(
        engine, chat_template, prompt, field, history
    )


# -- gpt-oss -------------------------------------------------------------------------------------


def _channel_header(rendered: str, body: str) -> str | None:
    """The ``<|channel|>...<|message|>`` header right before ``body`` in ``rendered``."""
    at = rendered.find(body)
    before = rendered[:at] if at >= 0 else ""
    if not before.endswith(HARMONY_MESSAGE) or HARMONY_CHANNEL not in before:
        return None
    header = before[before.rfind(HARMONY_CHANNEL) :]
    return header if HARMONY_START not in header else None


def _harmony(
    engine: ChatRenderer,
    template: str | None,
    prompt: str,
    field: str | None,
    history: str,
) -> ReasoningFormat | None:
    turns = [
        {"role": "user", "content": _QUESTION},
        {"role": "assistant", "content": _ANSWER},
        {"role": "user", "content": _FOLLOW_UP},
    ]
    rendered = _render(engine, template, turns)
    answer_start = _channel_header(rendered, _ANSWER)
    if answer_start is None:
        return None
    after = rendered[rendered.find(_ANSWER) + len(_ANSWER) :]
    token = _HARMONY_TOKEN.match(after)
    end = token.group() if token else "<|end|>"
    # The analysis header as the template writes it when it renders reasoning; otherwise the
    # harmony format's own.
    start = _channel_header(history, _REASONING) if field else None
    if start is None:
        start = f"{HARMONY_CHANNEL}analysis{HARMONY_MESSAGE}"
    return ReasoningFormat(
        family="gpt-oss",
        start=start,
        end=end,
        starts_inside=prompt.endswith(start),
        renders_history=field is not None,
        history_field=field or _HISTORY_FIELDS[0],
        answer_start=answer_start,
    )


# -- think tags ----------------------------------------------------------------------------------


def _tags_named(name: str) -> tuple[str, str]:
    return f"<{name}>", f"</{name}>"


def _opening_at_end(prompt: str) -> tuple[str, str] | None:
    """The tags whose opening tag ends ``prompt`` (whitespace aside)."""
    match = _OPENING_AT_END.search(prompt)
    return _tags_named(match.group(1)) if match else None


def _closing_in(text: str) -> tuple[str, str] | None:
    match = next((m for m in _TAG.finditer(text) if m.group(1)), None)
    return _tags_named(match.group(2)) if match else None


def _switch(
    engine: ChatRenderer, template: str | None, prompt: str
) -> tuple[str | None, bool, str, tuple[str, str] | None]:
    """The variable turning thinking on and off, whether leaving it unset means on, the
    generation prompt with it on, and the tags its prompts show.

    Without such a variable: ``(None, True, prompt, None)``.
    """
    for name in _SWITCHES:
        on = _generation_prompt(engine, template, {name: True})
        off = _generation_prompt(engine, template, {name: False})
        # A difference counts only if it is about the tags: "off" closes (an empty) reasoning
        # block, or "on" opens one.
        tags = (_closing_in(off) or _opening_at_end(on)) if on != off else None
        if tags is not None:
            return name, prompt == on, on, tags
    return None, True, prompt, None


def _tags_around(rendered: str, body: str) -> tuple[str, str] | None:
    """The tags enclosing ``body`` in ``rendered``, if it is enclosed in think tags."""
    at = rendered.find(body)
    if at < 0:
        return None
    openings = [m for m in _TAG.finditer(rendered[:at]) if not m.group(1)]
    if not openings:
        return None
    tags = _tags_named(openings[-1].group(2))
    return tags if tags[1] in rendered[at:] else None


def _cuts_tagged_history(engine: ChatRenderer, template: str | None, tags: tuple[str, str]) -> bool:
    """Whether the template drops a tagged reasoning block from an earlier answer, as
    templates of models that think but are not given their thinking back do (R1, QwQ)."""
    turns = [
        {"role": "user", "content": _QUESTION},
        {"role": "assistant", "content": f"{tags[0]}\n{_REASONING}\n{tags[1]}\n\n{_ANSWER}"},
        {"role": "user", "content": _FOLLOW_UP},
    ]
    rendered = _render(engine, template, turns)
    return _ANSWER in rendered and _REASONING not in rendered


def _empty_tags_before_answer(engine: ChatRenderer, template: str | None) -> tuple[str, str] | None:
    """The tags of an empty reasoning block the template writes before an earlier answer,
    as templates of models that open their thinking themselves do (Kimi K2 Thinking)."""
    turns = [
        {"role": "user", "content": _QUESTION},
        {"role": "assistant", "content": _ANSWER},
    ]
    rendered = _render(engine, template, turns, generation_prompt=False)
    match = _EMPTY_BLOCK_BEFORE_ANSWER.search(rendered)
    return _tags_named(match.group(1)) if match else None


_EMPTY_BLOCK_BEFORE_ANSWER = re.compile(
    r"<([A-Za-z_:]*think[A-Za-z_]*)>\s*</\1>\s*" + re.escape(_ANSWER)
)


def _plain_markers(prompt: str, history: str) -> tuple[str, str] | None:
    """Markers that are not tags: the generation prompt ends with a phrase that opens the
    reasoning, and the template writes earlier reasoning, then a phrase, then the answer
    (Apriel's "Here are my reasoning steps:" ... "[BEGIN FINAL RESPONSE]")."""
    at, answer_at = history.find(_REASONING), history.find(_ANSWER)
    if at < 0 or answer_at < at:
        return None
    end = history[at + len(_REASONING) : answer_at].strip()
    before = history[:at]
    # The assistant turn's header is the longest end of what precedes the reasoning that the
    # generation prompt holds too; what the prompt writes after that header opens it.
    header = next(
        (before[i:] for i in range(len(before)) if before[i:].strip() and before[i:] in prompt),
        "",
    )
    start = prompt[prompt.rfind(header) + len(header) :].strip() if header else ""
    # Plain words only: special tokens and tags there belong to other formats (a channel
    # header, a closed empty block), and a phrase the earlier turn also shows opens nothing.
    if not start or not end or _SPECIAL.search(start) or start in before:
        return None
    return start, end


_SPECIAL = re.compile("[<>|\uff5c]")  # \uff5c: the full-width bar of DeepSeek-style tokens


def _think_tags(
    engine: ChatRenderer,
    template: str | None,
    prompt: str,
    field: str | None,
    history: str,
) -> ReasoningFormat | None:
    switch, default_on, on_prompt, switch_tags = _switch(engine, template, prompt)
    opening = _opening_at_end(on_prompt)
    around = _tags_around(history, _REASONING) if field else None
    tags = opening or switch_tags or around
    if tags is None and _cuts_tagged_history(engine, template, _DEFAULT_TAGS):
        tags = _DEFAULT_TAGS
    if tags is None:
        tags = _empty_tags_before_answer(engine, template)
    if tags is None and field is not None:
        markers = _plain_markers(on_prompt, history)
        if markers is not None:
            return ReasoningFormat(
                family="think-tags",
                start=markers[0],
                end=markers[1],
                starts_inside=True,
                switch=switch,
                default_on=default_on,
                renders_history=True,
                history_field=field,
            )
    if tags is None:
        return None
    return ReasoningFormat(
        family="think-tags",
        start=tags[0],
        end=tags[1],
        starts_inside=opening is not None,
        switch=switch,
        default_on=default_on,
        renders_history=field is not None,
        history_field=field or _HISTORY_FIELDS[0],
    )
