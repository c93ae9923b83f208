"""Images through ChatLlamaCpp (LangChain) and LlamaCpp (LlamaIndex), on SmolLM2-135M with the
tiny random-weight projector: every way each framework spells an image reaches the model as the
same pixels, sources are held to the adapter's ImagePolicy, and refusals leave the engine
serving. Nothing is fetched for a model without a projector.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock
from PIL import Image

from llamacpp_integrations.errors import ImageInputNotSupportedError, ImageLoadError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp
from llamacpp_integrations.multimodal import ImagePolicy
from tests.loopback_http import LoopbackServer, serving

QUESTION = "Describe this picture."
# A KV stream per sequence: these tests compare answers (one image in every form gets one
# answer), which a unified cache would let depend on the cells earlier requests left.
SETTINGS: dict[str, Any] = {"n_ctx_per_seq": 1024, "n_seq_max": 4, "kv_unified": False}


def _png() -> bytes:
    image = Image.new("RGB", (48, 32))
    image.putdata(
        [((x * 5) % 256, (y * 7) % 256, (x * y) % 256) for y in range(32) for x in range(48)]
    )
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


PNG = _png()
B64 = base64.b64encode(PNG).decode()
DATA_URI = f"data:image/png;base64,{B64}"


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        server = self.server
        assert isinstance(server, LoopbackServer)
        server.hits.append(self.path)
        if self.path == "/picture.png":
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(PNG)))
            self.end_headers()
            self.wfile.write(PNG)
        elif self.path == "/to-metadata":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with serving(_Handler) as httpd:
        yield httpd


LOCAL_HTTP = ImagePolicy(allow_remote=True, allow_private_networks=True)


@pytest.fixture(scope="module")
def chat(smollm_path: Path, projector: Path) -> ChatLlamaCpp:
    return ChatLlamaCpp(
        model=str(smollm_path), mmproj=str(projector), temperature=0, max_tokens=8, **SETTINGS
    )


# ---------------------------------------------------------------------------------- LangChain


LANGCHAIN_FORMS: dict[str, dict[str, Any]] = {
    "v0 image_url": {"type": "image_url", "image_url": {"url": DATA_URI}},
    "v0 image_url string": {"type": "image_url", "image_url": DATA_URI},
    "v0 standard base64": {
        "type": "image",
        "source_type": "base64",
        "data": B64,
        "mime_type": "image/png",
    },
    "v1 base64": {"type": "image", "base64": B64, "mime_type": "image/png"},
}


def _lc_message(block: dict[str, Any]) -> list[HumanMessage]:
    return [HumanMessage(content=[block, {"type": "text", "text": QUESTION}])]


def test_langchain_every_image_form_reaches_the_model_alike(chat: ChatLlamaCpp) -> None:
    assert chat.profile is not None and chat.profile.get("image_inputs") is True
    answers = {name: chat.invoke(_lc_message(block)) for name, block in LANGCHAIN_FORMS.items()}
    texts = {answer.text for answer in answers.values()}
    assert len(texts) == 1, answers
    text_only = chat.invoke([HumanMessage(content=QUESTION)])
    counted = chat.get_num_tokens_from_messages(_lc_message(LANGCHAIN_FORMS["v1 base64"]))
    for answer in answers.values():
        assert isinstance(answer, AIMessage) and answer.usage_metadata is not None
        assert text_only.usage_metadata is not None
        assert answer.usage_metadata["input_tokens"] > text_only.usage_metadata["input_tokens"]
        assert answer.usage_metadata["input_tokens"] == counted


async def test_langchain_async_and_stream_with_images(chat: ChatLlamaCpp) -> None:
    messages = _lc_message(LANGCHAIN_FORMS["v1 base64"])
    sync = chat.invoke(messages)
    assert (await chat.ainvoke(messages)).text == sync.text
    streamed = [chunk async for chunk in chat.astream(messages)]
    assert "".join(chunk.text for chunk in streamed) == sync.text
    assert sync.usage_metadata is not None
    assert streamed[-1].usage_metadata == sync.usage_metadata | {
        "input_token_details": streamed[-1].usage_metadata["input_token_details"]  # type: ignore[index]
    }


def test_langchain_image_in_a_tool_result(chat: ChatLlamaCpp) -> None:
    messages = [
        HumanMessage("Fetch a picture and describe it."),
        AIMessage("", tool_calls=[{"id": "1", "name": "picture", "args": {}, "type": "tool_call"}]),
        ToolMessage(content=[LANGCHAIN_FORMS["v1 base64"]], tool_call_id="1", name="picture"),
    ]
    answer = chat.invoke(messages)
    without = chat.invoke(
        [*messages[:2], ToolMessage(content="(no picture)", tool_call_id="1", name="picture")]
    )
    assert answer.usage_metadata is not None and without.usage_metadata is not None
    assert answer.usage_metadata["input_tokens"] > without.usage_metadata["input_tokens"]


def test_langchain_urls_follow_the_policy(chat: ChatLlamaCpp, server: LoopbackServer) -> None:
    picture = {"type": "image", "url": server.url("/picture.png")}
    server.hits.clear()
    with pytest.raises(ImageLoadError) as refused:
        chat.invoke(_lc_message(picture))
    assert refused.value.reason == "remote-disabled" and server.hits == []

    allowed = chat.model_copy(update={"image_policy": LOCAL_HTTP})
    by_url = allowed.invoke(_lc_message(picture))
    assert server.hits == ["/picture.png"]
    assert by_url.text == chat.invoke(_lc_message(LANGCHAIN_FORMS["v1 base64"])).text

    # Explicitly allowed local server redirecting to the cloud metadata address: refused.
    with pytest.raises(ImageLoadError) as metadata:
        allowed.invoke(_lc_message({"type": "image", "url": server.url("/to-metadata")}))
    assert metadata.value.reason == "private-address"
    # file: URLs are refused whatever the policy.
    with pytest.raises(ImageLoadError) as scheme:
        allowed.invoke(
            _lc_message({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}})
        )
    assert scheme.value.reason == "scheme-refused"
    assert chat.invoke([HumanMessage("Hello")]).text is not None  # still serving


def test_langchain_local_paths_only_under_allowed_dirs(chat: ChatLlamaCpp, tmp_path: Path) -> None:
    picture = tmp_path / "picture.png"
    picture.write_bytes(PNG)
    block = {"type": "image", "url": str(picture)}
    with pytest.raises(ImageLoadError) as refused:
        chat.invoke(_lc_message(block))
    assert refused.value.reason == "path-not-allowed"
    allowed = chat.model_copy(update={"image_policy": ImagePolicy(allowed_dirs=(tmp_path,))})
    assert (
        allowed.invoke(_lc_message(block)).text
        == chat.invoke(_lc_message(LANGCHAIN_FORMS["v1 base64"])).text
    )


def test_langchain_without_projector_fetches_nothing(
    smollm_path: Path, server: LoopbackServer
) -> None:
    text_only = ChatLlamaCpp(model=str(smollm_path), temperature=0, max_tokens=4)
    assert text_only.profile is not None and text_only.profile.get("image_inputs") is False
    permissive = text_only.model_copy(update={"image_policy": LOCAL_HTTP})
    server.hits.clear()
    with pytest.raises(ImageInputNotSupportedError):
        permissive.invoke(_lc_message({"type": "image", "url": server.url("/picture.png")}))
    assert server.hits == []


# ---------------------------------------------------------------------------------- LlamaIndex


@pytest.fixture(scope="module")
def llm(smollm_path: Path, projector: Path) -> LlamaCpp:
    return LlamaCpp(
        model=str(smollm_path), mmproj=str(projector), temperature=0, max_tokens=8, **SETTINGS
    )


def _li_message(block: ImageBlock) -> list[ChatMessage]:
    return [ChatMessage(role="user", blocks=[block, TextBlock(text=QUESTION)])]


def test_llama_index_image_blocks_reach_the_model_alike(
    llm: LlamaCpp, tmp_path: Path, server: LoopbackServer
) -> None:
    picture = tmp_path / "picture.png"
    picture.write_bytes(PNG)
    policy = ImagePolicy(allowed_dirs=(tmp_path,), allow_remote=True, allow_private_networks=True)
    allowed = llm.model_copy(update={"image_policy": policy})
    blocks = {
        "bytes": ImageBlock(image=PNG),
        "base64 bytes": ImageBlock(image=B64.encode(), image_mimetype="image/png"),
        "data URL": ImageBlock(url=DATA_URI),
        "path": ImageBlock(path=picture),
        "http URL": ImageBlock(url=server.url("/picture.png")),
    }
    answers = {name: allowed.chat(_li_message(block)) for name, block in blocks.items()}
    assert len({a.message.content for a in answers.values()}) == 1, answers
    text_only = llm.chat([ChatMessage(role="user", content=QUESTION)])
    for answer in answers.values():
        assert (
            answer.additional_kwargs["prompt_tokens"] > text_only.additional_kwargs["prompt_tokens"]
        )


async def test_llama_index_async_and_stream_with_images(llm: LlamaCpp) -> None:
    messages = _li_message(ImageBlock(image=PNG))
    sync = llm.chat(messages)
    assert (await llm.achat(messages)).message.content == sync.message.content
    responses = [response async for response in await llm.astream_chat(messages)]
    assert responses and responses[-1].message.content == sync.message.content


def test_llama_index_policy_and_missing_projector(
    llm: LlamaCpp, smollm_path: Path, tmp_path: Path, server: LoopbackServer
) -> None:
    picture = tmp_path / "picture.png"
    picture.write_bytes(PNG)
    with pytest.raises(ImageLoadError) as refused:
        llm.chat(_li_message(ImageBlock(path=picture)))
    assert refused.value.reason == "path-not-allowed"
    server.hits.clear()
    with pytest.raises(ImageLoadError) as remote:
        llm.chat(_li_message(ImageBlock(url=server.url("/picture.png"))))
    assert remote.value.reason == "remote-disabled" and server.hits == []
    text_only = LlamaCpp(model=str(smollm_path), temperature=0, max_tokens=4)
    with pytest.raises(ImageInputNotSupportedError):
        text_only.chat(_li_message(ImageBlock(image=PNG)))
    assert llm.chat([ChatMessage(role="user", content="Hi")]).message.content is not None
