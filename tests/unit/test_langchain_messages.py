"""Translation of LangChain messages to the engine's chat messages (no model needed)."""

from __future__ import annotations

import pytest
from langchain_core.messages import (
    AIMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from llamacpp_integrations.engine import ImageInput, Usage
from llamacpp_integrations.errors import ImageInputNotSupportedError, UnsupportedContentError
from llamacpp_integrations.langchain.messages import (
    openai_tool_calls,
    to_engine_messages,
    tool_call_chunks,
    tool_calls_to_langchain,
    usage_metadata,
)
from llamacpp_integrations.tools import ToolCall, ToolCallDelta


def test_roles_names_and_text_content() -> None:
    out = to_engine_messages(
        [
            SystemMessage("Be brief."),
            HumanMessage("Hi", name="ada"),
            AIMessage("Hello"),
            ChatMessage(role="human", content="again"),
            ChatMessage(role="critic", content="meh"),
        ]
    )
    assert out == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi", "name": "ada"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "again"},
        {"role": "critic", "content": "meh"},
    ]


def test_list_content_is_flattened_in_every_form() -> None:
    v0 = HumanMessage(content=[{"type": "text", "text": "a"}, "b", {"type": "text", "text": "c"}])
    assert to_engine_messages([v0])[0]["content"] == "abc"
    ai = AIMessage(
        content=[
            {"type": "text", "text": "thinking done. "},
            {"type": "tool_use", "id": "x", "name": "f", "input": {}},
            {"type": "reasoning", "reasoning": "hidden"},
            {"type": "text", "text": "answer"},
        ]
    )
    assert to_engine_messages([ai])[0]["content"] == "thinking done. answer"


def test_tool_calls_and_results() -> None:
    ai = AIMessage(
        "",
        tool_calls=[
            {"name": "add", "args": {"a": 1, "b": 2}, "id": "c1", "type": "tool_call"},
            {"name": "neg", "args": {"a": 3}, "id": None, "type": "tool_call"},
        ],
    )
    result = ToolMessage("3", tool_call_id="c1", name="add")
    failed = ToolMessage("boom", tool_call_id="c2", status="error")
    legacy = FunctionMessage(name="add", content="3")
    out = to_engine_messages([ai, result, failed, legacy])
    assert out[0]["tool_calls"] == [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "add", "arguments": {"a": 1, "b": 2}},
        },
        {"id": "call_1", "type": "function", "function": {"name": "neg", "arguments": {"a": 3}}},
    ]
    assert out[1] == {"role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"}
    assert out[2]["content"] == "Error: boom"
    assert out[3] == {"role": "tool", "content": "3", "name": "add"}


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "image", "source_type": "base64", "data": "AAAA", "mime_type": "image/png"},
        {"type": "image", "base64": "AAAA", "mime_type": "image/png"},
        {"type": "image", "url": "https://example.com/a.png"},
    ],
)
def test_images_raise_until_the_model_has_a_projector(block: dict[str, object]) -> None:
    with pytest.raises(ImageInputNotSupportedError, match="projector"):
        to_engine_messages([HumanMessage(content=[{"type": "text", "text": "see"}, block])])


@pytest.mark.parametrize("kind", ["audio", "file", "video", "made_up"])
def test_other_blocks_raise_unsupported(kind: str) -> None:
    with pytest.raises(UnsupportedContentError, match=kind):
        to_engine_messages([HumanMessage(content=[{"type": kind, "base64": "AAAA"}])])


def test_outputs_in_langchain_shapes() -> None:
    call = ToolCall(id="call_1", name="add", arguments={"a": 1}, arguments_json='{"a": 1}')
    assert tool_calls_to_langchain([call]) == [
        {"name": "add", "args": {"a": 1}, "id": "call_1", "type": "tool_call"}
    ]
    assert openai_tool_calls([call])[0]["function"] == {"name": "add", "arguments": '{"a": 1}'}
    chunks = tool_call_chunks(
        [ToolCallDelta(0, "call_1", "add", '{"a"'), ToolCallDelta(0, None, None, ": 1}")]
    )
    assert [c["args"] for c in chunks] == ['{"a"', ": 1}"] and chunks[1]["name"] is None
    usage = usage_metadata(Usage(prompt_tokens=10, completion_tokens=5, cached_prompt_tokens=4))
    assert usage == {
        "input_tokens": 10,
        "output_tokens": 5,
        "total_tokens": 15,
        "input_token_details": {"cache_read": 4},
    }


@pytest.mark.parametrize(
    ("block", "source"),
    [
        ({"type": "image_url", "image_url": {"url": "https://e.com/a.png"}}, "https://e.com/a.png"),
        (
            {"type": "image_url", "image_url": "data:image/png;base64,QQ=="},
            "data:image/png;base64,QQ==",
        ),
        ({"type": "input_image", "image_url": "https://e.com/b.png"}, "https://e.com/b.png"),
        (
            {"type": "image", "source_type": "base64", "data": "QQ==", "mime_type": "image/png"},
            "data:image/png;base64,QQ==",
        ),
        (
            {"type": "image", "source_type": "url", "url": "https://e.com/c.png"},
            "https://e.com/c.png",
        ),
        (
            {"type": "image", "base64": "QQ==", "mime_type": "image/jpeg"},
            "data:image/jpeg;base64,QQ==",
        ),
        ({"type": "image", "base64": "QQ=="}, "QQ=="),
        ({"type": "image", "url": "https://e.com/d.png"}, "https://e.com/d.png"),
    ],
)
def test_image_blocks_are_read_in_order_with_the_text(
    block: dict[str, object], source: str
) -> None:
    seen: list[str] = []
    pixels = ImageInput(1, 1, b"\0\0\0")

    def read(src: str) -> ImageInput:
        seen.append(src)
        return pixels

    content = [{"type": "text", "text": "see "}, {"type": "text", "text": "this"}, block, "!"]
    out = to_engine_messages([HumanMessage(content=content)], read)
    assert seen == [source]
    assert out[0]["content"] == [
        {"type": "text", "text": "see this"},
        {"type": "image", "image": pixels},
        {"type": "text", "text": "!"},
    ]


def test_image_blocks_naming_a_file_id_are_refused() -> None:
    block = {"type": "image", "file_id": "file-123"}
    with pytest.raises(UnsupportedContentError, match="file id"):
        to_engine_messages([HumanMessage(content=[block])], lambda src: ImageInput(1, 1, b"\0" * 3))


def test_images_in_tool_results_keep_the_error_prefix() -> None:
    pixels = ImageInput(1, 1, b"\0\0\0")
    message = ToolMessage(
        content=[{"type": "image", "base64": "QQ==", "mime_type": "image/png"}],
        tool_call_id="c1",
        status="error",
    )
    out = to_engine_messages([message], lambda src: pixels)
    assert out[0]["content"] == [
        {"type": "text", "text": "Error: "},
        {"type": "image", "image": pixels},
    ]
