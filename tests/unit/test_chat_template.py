"""Tests of sandboxed chat-template rendering."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamacpp_integrations.engine.types import ChatMessage
from llamacpp_integrations.errors import ChatTemplateError, InvalidRequestError
from llamacpp_integrations.prompts.chat_template import (
    ChatTemplate,
    messages_to_dicts,
    strip_leading_bos,
)

# SmolLM2's template, verbatim.
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

BOS, EOS = "<|begin_of_text|>", "<|eot_id|>"
USER = [{"role": "user", "content": "Hi!"}]


def chatml() -> ChatTemplate:
    return ChatTemplate(CHATML, bos_token="", eos_token="<|im_end|>")


# --- real templates ----------------------------------------------------------------------------


def test_chatml_adds_default_system_prompt_and_generation_prompt() -> None:
    assert chatml().render(USER) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    )


def test_chatml_with_system_and_no_generation_prompt() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello."},
    ]
    assert chatml().render(messages, add_generation_prompt=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
    )


def test_llama3_prints_bos_token() -> None:
    template = ChatTemplate(LLAMA3, bos_token=BOS, eos_token=EOS)
    text = template.render([{"role": "user", "content": "  Hi!  "}])
    assert text == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert strip_leading_bos(text, BOS).startswith("<|start_header_id|>user")


def test_chat_message_objects_via_messages_to_dicts() -> None:
    messages = messages_to_dicts(
        [ChatMessage(role="system", content="S"), {"role": "user", "content": "U"}]
    )
    assert messages == [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert chatml().render(messages, add_generation_prompt=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
    )


def test_messages_to_dicts_keeps_tool_fields() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    out = messages_to_dicts(
        [
            ChatMessage(role="assistant", content="", tool_calls=[call]),
            ChatMessage(role="tool", content="42", tool_call_id="c1", name="f"),
        ]
    )
    assert out[0]["tool_calls"] == [call]
    assert out[1] == {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"}


def test_trim_and_lstrip_blocks_are_on() -> None:
    # trim_blocks eats the newline after a block tag, lstrip_blocks the indent before one.
    source = "{% for m in messages %}\n    {% if m.role %}{{ m.role }}{% endif %}\n{% endfor %}!"
    assert ChatTemplate(source, bos_token="", eos_token="").render(USER) == "user!"


def test_undefined_variables_are_falsy() -> None:
    source = "{% if tools %}T{% endif %}{% if messages[0].tool_calls %}C{% endif %}ok"
    assert ChatTemplate(source, bos_token="", eos_token="").render(USER) == "ok"


def test_extra_variables_are_passed() -> None:
    source = "{{ enable_thinking }}|{{ eos_token }}"
    template = ChatTemplate(source, bos_token="", eos_token="</s>")
    assert template.render(USER, enable_thinking=False) == "False|</s>"
    # Extra variables cannot replace the ones every template relies on.
    assert template.render(USER, eos_token="X") == "|</s>"


def test_loop_controls_and_generation_tag_are_supported() -> None:
    source = (
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
        "{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
    )
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    assert ChatTemplate(source, bos_token="", eos_token="").render(messages) == "a"


def test_strftime_now() -> None:
    source = "{{ strftime_now('%Y') }}"
    year = ChatTemplate(source, bos_token="", eos_token="").render(USER)
    assert year.isdigit() and len(year) == 4


# --- tools and tojson --------------------------------------------------------------------------

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Météo",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_tools_are_passed_only_when_given() -> None:
    source = "{% if tools is defined %}{{ tools | length }} tools{% else %}none{% endif %}"
    template = ChatTemplate(source, bos_token="", eos_token="")
    assert template.render(USER) == "none"
    assert template.render(USER, tools=[TOOL]) == "1 tools"
    assert template.render(USER, tools=[]) == "0 tools"


def test_tojson_keeps_non_ascii_and_takes_indent() -> None:
    source = "{% for t in tools %}{{ t | tojson(indent=2) }}{% endfor %}"
    text = ChatTemplate(source, bos_token="", eos_token="").render(USER, tools=[TOOL])
    assert text == json.dumps(TOOL, indent=2, ensure_ascii=False)
    assert "Météo" in text


def test_tojson_keyword_arguments() -> None:
    source = (
        "{{ tools[0] | tojson(separators=(',', ':'), sort_keys=true) }}\n"
        "{{ tools[0].function.description | tojson(ensure_ascii=true) }}"
    )
    text = ChatTemplate(source, bos_token="", eos_token="").render(USER, tools=[TOOL])
    compact, escaped = text.split("\n")
    assert compact == json.dumps(TOOL, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    assert escaped == '"M\\u00e9t\\u00e9o"'


def test_tojson_does_not_html_escape() -> None:
    source = "{{ messages[0].content | tojson }}"
    text = ChatTemplate(source, bos_token="", eos_token="").render(
        [{"role": "user", "content": "<a & 'b'>"}]
    )
    assert text == "\"<a & 'b'>\""


def test_tojson_handles_read_only_mappings_and_tuples() -> None:
    from types import MappingProxyType

    source = "{{ tools | tojson }}"
    tools: Any = (MappingProxyType({"name": "f", "args": ("x", "y")}),)
    text = ChatTemplate(source, bos_token="", eos_token="").render(USER, tools=tools)
    assert json.loads(text) == [{"name": "f", "args": ["x", "y"]}]


def test_tojson_takes_what_filters_return() -> None:
    # DeepSeek R1's template (llama.cpp's copy) passes map's generator straight to tojson.
    source = "{{ tools | map(attribute='function') | tojson }}"
    text = ChatTemplate(source, bos_token="", eos_token="").render(USER, tools=[TOOL])
    assert json.loads(text) == [TOOL["function"]]


# --- failures ----------------------------------------------------------------------------------


def test_raise_exception_becomes_chat_template_error() -> None:
    source = (
        "{% for m in messages %}{% if m.role == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}{% endfor %}"
    )
    template = ChatTemplate(source, bos_token="", eos_token="")
    with pytest.raises(ChatTemplateError, match=r"^System role not supported$"):
        template.render([{"role": "system", "content": "x"}])
    assert template.render(USER) == ""


def test_chat_template_error_is_an_invalid_request() -> None:
    assert issubclass(ChatTemplateError, InvalidRequestError)


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ messages.append({'role': 'x'}) }}",
        "{{ messages[0].update({'role': 'x'}) }}",
    ],
)
def test_sandbox_blocks_unsafe_access(source: str) -> None:
    template = ChatTemplate(source, bos_token="", eos_token="")
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(ChatTemplateError, match="SecurityError"):
        template.render(messages)
    assert messages == [{"role": "user", "content": "hi"}]


def test_syntax_error_at_construction() -> None:
    with pytest.raises(ChatTemplateError, match="syntax error at line 2"):
        ChatTemplate("ok\n{% for m in messages %}{{ m }}", bos_token="", eos_token="")


def test_unknown_filter_at_construction() -> None:
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{{ messages | no_such_filter }}", bos_token="", eos_token="")


def test_runtime_type_error_names_the_problem() -> None:
    # ChatML concatenates content with strings: None content is a TypeError inside the template.
    with pytest.raises(ChatTemplateError, match="TypeError"):
        chatml().render([{"role": "user", "content": None}])


def test_undefined_use_is_a_chat_template_error() -> None:
    template = ChatTemplate("{{ missing.attr }}", bos_token="", eos_token="")
    with pytest.raises(ChatTemplateError, match="UndefinedError"):
        template.render(USER)


# --- message validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([], "empty"),
        ("hello", "list of messages"),
        (["hello"], "not a mapping"),
        ([{"content": "x"}], "no role"),
        ([{"role": 3, "content": "x"}], "no role"),
        ([{"role": "user", "content": 3}], "content must be"),
        ([{"role": "user", "content": b"x"}], "content must be"),
        ([{"role": "user", "content": ["text"]}], "parts must be mappings"),
    ],
)
def test_bad_messages_are_rejected(messages: Any, problem: str) -> None:
    with pytest.raises(InvalidRequestError, match=problem) as info:
        chatml().render(messages)
    assert not isinstance(info.value, ChatTemplateError)


def test_good_content_shapes_are_accepted() -> None:
    source = "{% for m in messages %}{{ m.role }};{% endfor %}"
    template = ChatTemplate(source, bos_token="", eos_token="")
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None},
        {"role": "assistant"},
    ]
    assert template.render(messages) == "user;assistant;assistant;"


def test_messages_to_dicts_rejects_non_messages() -> None:
    with pytest.raises(InvalidRequestError, match=r"messages\[1\]"):
        messages_to_dicts([{"role": "user", "content": "x"}, 42])  # type: ignore[list-item]
    with pytest.raises(InvalidRequestError, match="no role"):
        messages_to_dicts([ChatMessage(role="", content="x")])


# --- strip_leading_bos -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "bos", "expected"),
    [
        ("<s>hello", "<s>", "hello"),
        ("<s><s>hello", "<s>", "<s>hello"),
        ("hello<s>", "<s>", "hello<s>"),
        (" <s>hello", "<s>", " <s>hello"),
        ("<s>hello", "", "<s>hello"),
    ],
)
def test_strip_leading_bos(text: str, bos: str, expected: str) -> None:
    assert strip_leading_bos(text, bos) == expected
