"""LlamaIndex adapters without a model: class interface, message and block translation, tool
calls read back from responses, lenient JSON of streamed arguments.

Nothing here loads a model: ``LlamaCpp`` / ``LlamaCppEmbedding`` create their engine on first
use only, and every method exercised here works on LlamaIndex objects alone.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.base.llms.types import (
    AudioBlock,
    CacheControl,
    CachePoint,
    ChatMessage,
    ChatResponse,
    DocumentBlock,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    VideoBlock,
)
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import LLM, ToolSelection
from llama_index.core.tools import FunctionTool
from pydantic import BaseModel

from llamacpp_integrations.client import read_response_format
from llamacpp_integrations.engine import ImageInput, TokenLogprob, TopLogprob, Usage
from llamacpp_integrations.errors import (
    ImageInputNotSupportedError,
    InvalidRequestError,
    UnsupportedContentError,
)
from llamacpp_integrations.llama_index import LlamaCpp, LlamaCppEmbedding
from llamacpp_integrations.llama_index.messages import (
    to_engine_message,
    to_engine_messages,
    tools_to_openai,
)
from llamacpp_integrations.llama_index.responses import (
    PartialToolCall,
    assistant_message,
    response_raw,
    to_logprobs,
    tool_selections,
    usage_kwargs,
)
from llamacpp_integrations.tools import ToolCall, parse_partial_json


def _schema_of(response_format: object) -> object:
    return read_response_format(response_format).schema


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


# -- the interface LlamaIndex integration packages check ---------------------------------------


def test_llm_class_is_a_function_calling_llm() -> None:
    names = [base.__name__ for base in LlamaCpp.__mro__]
    assert BaseLLM.__name__ in names
    assert LLM.__name__ in names
    assert FunctionCallingLLM.__name__ in names
    assert issubclass(LlamaCpp, FunctionCallingLLM)
    assert LlamaCpp.class_name() == "llamacpp_integrations_llm"


def test_embedding_class_is_a_base_embedding() -> None:
    names = [base.__name__ for base in LlamaCppEmbedding.__mro__]
    assert BaseEmbedding.__name__ in names
    assert issubclass(LlamaCppEmbedding, BaseEmbedding)


def test_construction_does_not_load_a_model() -> None:
    llm = LlamaCpp(model="/nonexistent/model.gguf", temperature=0.1, max_tokens=8)
    embedding = LlamaCppEmbedding(model="/nonexistent/model.gguf", embed_batch_size=4)
    assert llm.binding.loaded() is None and embedding.binding.loaded() is None
    assert embedding.model_name == "model"  # the spec's file name without .gguf
    assert embedding.embed_batch_size == 4
    # Serialisable like other LlamaIndex components (the engine is not part of the state).
    assert llm.to_dict()["temperature"] == 0.1
    assert "engine" not in llm.to_dict()


def test_only_engine_settings_the_user_set_are_passed_on() -> None:
    assert LlamaCpp(model="m")._engine_settings() == {}
    assert LlamaCpp(
        model="m", n_ctx_per_seq=512, engine_kwargs={"n_batch": 64}
    )._engine_settings() == {
        "n_ctx_per_seq": 512,
        "n_batch": 64,
    }
    assert LlamaCppEmbedding(model="m", embedding_n_ctx=256)._engine_settings() == {
        "embedding_n_ctx": 256
    }


# -- LlamaIndex messages -> engine messages ----------------------------------------------------


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        (MessageRole.SYSTEM, "system"),
        (MessageRole.DEVELOPER, "system"),
        (MessageRole.USER, "user"),
        (MessageRole.ASSISTANT, "assistant"),
        (MessageRole.CHATBOT, "assistant"),
        (MessageRole.MODEL, "assistant"),
        (MessageRole.TOOL, "tool"),
        (MessageRole.FUNCTION, "tool"),
    ],
)
def test_roles(role: MessageRole, expected: str) -> None:
    message = to_engine_message(ChatMessage(role=role, content="hello"))
    assert message.role == expected
    assert message.content == "hello"


def test_text_blocks_are_joined_like_message_content() -> None:
    message = ChatMessage(role="user", blocks=[TextBlock(text="one"), TextBlock(text="two")])
    assert to_engine_message(message).content == message.content == "one\ntwo"


def test_empty_message_is_empty_text() -> None:
    assert to_engine_message(ChatMessage(role="user", blocks=[])).content == ""


def test_thinking_goes_back_as_reasoning_and_cache_points_are_left_out() -> None:
    message = ChatMessage(
        role="assistant",
        blocks=[
            ThinkingBlock(content="let me think"),
            TextBlock(text="answer"),
            CachePoint(cache_control=CacheControl(type="ephemeral")),
        ],
    )
    translated = to_engine_message(message)
    assert translated.content == "answer"
    assert translated.reasoning == "let me think"
    assert translated.to_template_dict()["reasoning_content"] == "let me think"


def _image_blocks(tmp_path: Path) -> dict[str, ImageBlock]:
    path = tmp_path / "pixel.png"
    path.write_bytes(PNG)
    return {
        "path": ImageBlock(path=path),
        "url": ImageBlock(url="https://example.com/pixel.png"),
        "bytes": ImageBlock(image=PNG),
        "base64": ImageBlock(image=base64.b64encode(PNG), image_mimetype="image/png"),
    }


@pytest.mark.parametrize("kind", ["path", "url", "bytes", "base64"])
def test_images_raise_image_input_not_supported(tmp_path: Path, kind: str) -> None:
    block = _image_blocks(tmp_path)[kind]
    message = ChatMessage(role="user", blocks=[TextBlock(text="What is this?"), block])
    with pytest.raises(ImageInputNotSupportedError, match="mmproj") as caught:
        to_engine_messages([message])
    assert isinstance(caught.value, UnsupportedContentError)
    assert "block 1" in str(caught.value)


@pytest.mark.parametrize(
    ("block", "name"),
    [
        (AudioBlock(audio=b"RIFF....WAVE", format="wav"), "AudioBlock"),
        (VideoBlock(video=b"\x00\x00\x00\x18ftypmp42"), "VideoBlock"),
        (
            DocumentBlock(data=b"%PDF-1.4 hello", document_mimetype="application/pdf"),
            "DocumentBlock",
        ),
    ],
)
def test_other_blocks_raise_unsupported_content_naming_them(block: Any, name: str) -> None:
    message = ChatMessage(role="user", blocks=[block])
    with pytest.raises(UnsupportedContentError, match=name) as caught:
        to_engine_message(message)
    assert not isinstance(caught.value, ImageInputNotSupportedError)


def test_tool_call_block_outside_an_assistant_message_is_refused() -> None:
    message = ChatMessage(role="user", blocks=[ToolCallBlock(tool_name="add", tool_kwargs={})])
    with pytest.raises(UnsupportedContentError, match="ToolCallBlock"):
        to_engine_message(message)


def test_assistant_tool_call_blocks_become_openai_calls() -> None:
    message = ChatMessage(
        role="assistant",
        blocks=[
            TextBlock(text=""),
            ToolCallBlock(tool_call_id="call_1", tool_name="add", tool_kwargs={"a": 1, "b": 2}),
            ToolCallBlock(tool_call_id="call_2", tool_name="shout", tool_kwargs='{"text": "hi"}'),
        ],
    )
    engine_message = to_engine_message(message)
    assert engine_message.role == "assistant"
    assert engine_message.tool_calls == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "add", "arguments": {"a": 1, "b": 2}},
        },
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "shout", "arguments": {"text": "hi"}},
        },
    ]


class _SdkCall(BaseModel):  # the shape of an OpenAI SDK tool call object
    id: str
    type: str
    function: dict[str, Any]


def test_additional_kwargs_tool_calls_in_openai_shapes() -> None:
    message = ChatMessage(
        role="assistant",
        content="",
        additional_kwargs={
            "tool_calls": [
                {
                    "id": "a1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                },
                _SdkCall(id="a2", type="function", function={"name": "shout", "arguments": "{}"}),
            ]
        },
    )
    calls = to_engine_message(message).tool_calls
    assert calls is not None
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("a1", "add", {"a": 1, "b": 2}),
        ("a2", "shout", {}),
    ]


def test_malformed_additional_kwargs_tool_calls_raise() -> None:
    message = ChatMessage(role="assistant", additional_kwargs={"tool_calls": [{"id": "x"}]})
    with pytest.raises(InvalidRequestError, match="no name"):
        to_engine_message(message)


def test_tool_results_carry_their_call_id() -> None:
    message = ChatMessage(
        role=MessageRole.TOOL, content="3", additional_kwargs={"tool_call_id": "call_1"}
    )
    engine_message = to_engine_message(message)
    assert (engine_message.role, engine_message.content, engine_message.tool_call_id) == (
        "tool",
        "3",
        "call_1",
    )
    named = to_engine_message(
        ChatMessage(
            role="tool", content="x", additional_kwargs={"tool_call_id": "c", "name": "add"}
        )
    )
    assert named.name == "add"


def test_tools_become_openai_specs() -> None:
    specs = tools_to_openai([FunctionTool.from_defaults(add), FunctionTool.from_defaults(shout)])
    assert [spec["function"]["name"] for spec in specs] == ["add", "shout"]
    assert specs[0]["function"]["parameters"]["required"] == ["a", "b"]
    assert specs[0]["type"] == "function"


# -- engine answers -> LlamaIndex responses -----------------------------------------------------

CALL = ToolCall(
    id="call_7", name="add", arguments={"a": 2, "b": 3}, arguments_json='{"a": 2, "b": 3}'
)


def test_assistant_message_holds_calls_as_blocks_and_openai_kwargs() -> None:
    message = assistant_message("Let me add.", [CALL])
    assert message.role == MessageRole.ASSISTANT
    assert message.content == "Let me add."
    blocks = [b for b in message.blocks if isinstance(b, ToolCallBlock)]
    assert [(b.tool_call_id, b.tool_name, b.tool_kwargs) for b in blocks] == [
        ("call_7", "add", {"a": 2, "b": 3})
    ]
    assert message.additional_kwargs["tool_calls"] == [
        {
            "id": "call_7",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
        }
    ]


def test_assistant_message_without_calls_has_plain_content() -> None:
    message = assistant_message("")
    assert message.content == ""
    assert "tool_calls" not in message.additional_kwargs


def test_answer_with_calls_translates_back_to_the_same_call() -> None:
    engine_message = to_engine_message(assistant_message("", [CALL]))
    assert engine_message.tool_calls == [
        {
            "id": "call_7",
            "type": "function",
            "function": {"name": "add", "arguments": {"a": 2, "b": 3}},
        }
    ]


def test_tool_calls_from_response() -> None:
    llm = LlamaCpp(model="unused.gguf")
    response = ChatResponse(message=assistant_message("", [CALL]))
    assert llm.get_tool_calls_from_response(response) == [
        ToolSelection(tool_id="call_7", tool_name="add", tool_kwargs={"a": 2, "b": 3})
    ]


def test_tool_calls_from_openai_style_kwargs_only() -> None:
    message = ChatMessage(
        role="assistant",
        content="",
        additional_kwargs={
            "tool_calls": [{"id": "x", "function": {"name": "shout", "arguments": '{"text": "hey'}}]
        },
    )
    assert tool_selections(message) == [
        ToolSelection(tool_id="x", tool_name="shout", tool_kwargs={"text": "hey"})
    ]


def test_no_tool_call_raises_only_when_asked() -> None:
    llm = LlamaCpp(model="unused.gguf")
    response = ChatResponse(message=assistant_message("just text"))
    assert llm.get_tool_calls_from_response(response, error_on_no_tool_call=False) == []
    with pytest.raises(ValueError, match="at least one tool call"):
        llm.get_tool_calls_from_response(response)


def test_partial_streamed_call_reads_leniently() -> None:
    partial = PartialToolCall("call_1", "add", '{"a": 12, "b": ')
    message = assistant_message("", [partial])
    assert tool_selections(message)[0].tool_kwargs == {"a": 12}
    assert message.additional_kwargs["tool_calls"][0]["function"]["arguments"] == '{"a": 12, "b": '


def test_single_call_kept_when_parallel_calls_are_not_allowed() -> None:
    llm = LlamaCpp(model="unused.gguf")
    second = ToolCall(
        id="call_8", name="shout", arguments={"text": "x"}, arguments_json='{"text": "x"}'
    )
    response = ChatResponse(message=assistant_message("", [CALL, second]))
    kept = llm._validate_chat_with_tools_response(response, [], allow_parallel_tool_calls=False)
    assert [c.tool_name for c in llm.get_tool_calls_from_response(kept)] == ["add"]
    both = llm._validate_chat_with_tools_response(response, [], allow_parallel_tool_calls=True)
    assert len(llm.get_tool_calls_from_response(both)) == 2


def test_logprobs_put_the_generated_token_first() -> None:
    top = (
        TopLogprob(token="Hi", token_id=2, logprob=-0.1, bytes=(72, 105)),
        TopLogprob(token="Yo", token_id=3, logprob=-2.5, bytes=(89, 111)),
    )
    entries = [TokenLogprob(token="Yo", token_id=3, logprob=-2.5, bytes=(89, 111), top=top)]
    (step,) = to_logprobs(entries) or []
    assert [(p.token, p.logprob, p.bytes) for p in step] == [
        ("Yo", -2.5, [89, 111]),
        ("Hi", -0.1, [72, 105]),
        ("Yo", -2.5, [89, 111]),
    ]
    assert to_logprobs(None) is None and to_logprobs(()) is None


def test_usage_shapes() -> None:
    usage = Usage(prompt_tokens=10, completion_tokens=5, cached_prompt_tokens=4, reasoning_tokens=3)
    assert usage_kwargs(usage) == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    raw = response_raw("req-1", "m", "stop", usage, None)
    assert raw["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "cached_prompt_tokens": 4,
        "reasoning_tokens": 3,
    }
    assert raw["finish_reason"] == "stop" and raw["id"] == "req-1"


# -- preparing tool turns -----------------------------------------------------------------------


def test_prepare_chat_with_tools() -> None:
    llm = LlamaCpp(model="unused.gguf")
    tools = [FunctionTool.from_defaults(add), FunctionTool.from_defaults(shout)]
    history = [ChatMessage(role="system", content="Be brief.")]
    prepared = llm._prepare_chat_with_tools(
        tools, user_msg="2+3?", chat_history=history, tool_required=True, max_tokens=16
    )
    assert [m.content for m in prepared["messages"]] == ["Be brief.", "2+3?"]
    assert history == [ChatMessage(role="system", content="Be brief.")]  # not modified
    assert [t["function"]["name"] for t in prepared["tools"]] == ["add", "shout"]
    assert prepared["tool_choice"] == "required"
    assert prepared["parallel_tool_calls"] is False
    assert prepared["max_tokens"] == 16

    named = llm._prepare_chat_with_tools(
        tools, user_msg="x", tool_choice="shout", tool_required=True
    )
    assert named["tool_choice"] == "shout"
    auto = llm._prepare_chat_with_tools(tools, user_msg="x", allow_parallel_tool_calls=True)
    assert (auto["tool_choice"], auto["parallel_tool_calls"]) == ("auto", True)
    none = llm._prepare_chat_with_tools([], user_msg="x")
    assert "tools" not in none


def test_response_formats() -> None:
    class Pet(BaseModel):
        name: str

    assert _schema_of(Pet) == Pet.model_json_schema()
    assert _schema_of({"type": "json_object"}) is None
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    assert (
        _schema_of({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        == schema
    )
    with pytest.raises(InvalidRequestError, match="response_format"):
        _schema_of("json")


# -- lenient JSON -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("{", {}),
        ('{"a', {}),
        ('{"a": ', {}),
        ('{"a": "hel', {"a": "hel"}),
        ('{"a": "x\\', {"a": "x"}),
        ('{"a": "x\\u00', {"a": "x"}),
        ('{"a": 12', {"a": 12}),
        ('{"a": 1.', {"a": 1}),
        ('{"a": 1.5e', {"a": 1.5}),
        ('{"a": tr', {}),
        ('{"a": true, "b": [1, 2', {"a": True, "b": [1, 2]}),
        ('{"a": {"b": {"c": nu', {"a": {"b": {}}}),
        ('{"a": [{"b": "c"}, {"d', {"a": [{"b": "c"}, {}]}),
        ("  [1, -", [1]),
    ],
)
def test_partial_json(text: str, expected: Any) -> None:
    assert parse_partial_json(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "tr", '{"a" 1}', "{1: 2}", '{"a": 1} x', "[1 2]"])
def test_partial_json_refuses_what_is_not_a_json_beginning(text: str) -> None:
    with pytest.raises(ValueError):
        parse_partial_json(text)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(value=JSON_VALUES, indent=st.sampled_from([None, 1]))
def test_every_prefix_of_json_parses_and_the_whole_parses_exactly(
    value: Any, indent: int | None
) -> None:
    text = json.dumps(value, indent=indent)
    assert parse_partial_json(text) == json.loads(text)
    for end in range(len(text)):
        try:
            parse_partial_json(text[:end])
        except ValueError as error:  # only "nothing yet" is allowed to fail
            assert str(error) == "no JSON value yet", (text[:end], error)


@pytest.mark.parametrize("kind", ["path", "url", "bytes", "base64"])
def test_image_blocks_are_read_with_the_reader(tmp_path: Path, kind: str) -> None:
    blocks = _image_blocks(tmp_path)
    seen: list[object] = []
    pixels = ImageInput(1, 1, b"\0\0\0")

    def read(source: object) -> ImageInput:
        seen.append(source)
        return pixels

    message = ChatMessage(
        role="user", blocks=[TextBlock(text="What"), TextBlock(text="is this?"), blocks[kind]]
    )
    assert to_engine_messages([message], read)[0].content == [
        {"type": "text", "text": "What\nis this?"},
        {"type": "image", "image": pixels},
    ]
    expected: object = {
        "path": tmp_path / "pixel.png",
        "url": "https://example.com/pixel.png",
        "bytes": PNG,  # LlamaIndex keeps image bytes base64-encoded; the reader gets them raw
        "base64": PNG,
    }[kind]
    assert seen == [expected]
