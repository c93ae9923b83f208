"""Audio through every entry point, on one engine with the tiny Ultravox projector.

LangChain's audio blocks (v1 base64 and URL, v0 base64, OpenAI's ``input_audio``), LlamaIndex's
``AudioBlock`` (bytes, path, URL) and the server's ``input_audio`` part (chat completions and the
Responses API) all reach the engine as the same clip: the same greedy answer, the same prompt
size. URLs and paths follow the images' policy (a local server on 127.0.0.1 counts the fetches).
The weights are random: no answer's words are checked.
"""

from __future__ import annotations

import base64
import io
import math
import struct
import wave
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from llama_index.core.base.llms.types import AudioBlock, ChatMessage, TextBlock
from starlette.testclient import TestClient

from llamacpp_integrations.engine import Engine, EngineConfig
from llamacpp_integrations.errors import AudioInputNotSupportedError, AudioLoadError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp
from llamacpp_integrations.multimodal import ImagePolicy
from llamacpp_integrations.server import create_app
from tests.loopback_http import LoopbackServer, serving

QUESTION = "What is said in this recording?"


def _wav() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"".join(struct.pack("<h", int(9000 * math.sin(i / 3))) for i in range(4000)))
    return out.getvalue()


WAV = _wav()
B64 = base64.b64encode(WAV).decode()
LOCAL_HTTP_FIELDS: dict[str, Any] = {"allow_remote": True, "allow_private_networks": True}
LOCAL_HTTP = ImagePolicy(**LOCAL_HTTP_FIELDS)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        server = self.server
        assert isinstance(server, LoopbackServer)
        server.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "audio/wav")
        self.send_header("Content-Length", str(len(WAV)))
        self.end_headers()
        self.wfile.write(WAV)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with serving(_Handler) as httpd:
        yield httpd


@pytest.fixture(scope="module")
def engine(smollm_path: Path, audio_projector: Path) -> Iterator[Engine]:
    # A KV stream per sequence: answers are compared across forms of one clip.
    config = EngineConfig(
        model=str(smollm_path),
        mmproj=str(audio_projector),
        n_seq_max=2,
        n_ctx_per_seq=512,
        kv_unified=False,
    )
    with Engine(config) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def chat(engine: Engine) -> ChatLlamaCpp:
    return ChatLlamaCpp(engine=engine, temperature=0, max_tokens=6)


@pytest.fixture(scope="module")
def reference(chat: ChatLlamaCpp) -> str:
    """The answer to the clip as v1 base64, which every other form must match."""
    block = {"type": "audio", "base64": B64, "mime_type": "audio/wav"}
    return chat.invoke([HumanMessage(content=[block, {"type": "text", "text": QUESTION}])]).text


def test_langchain_audio_blocks(chat: ChatLlamaCpp, reference: str, server: LoopbackServer) -> None:
    assert chat.profile is not None and chat.profile.get("audio_inputs") is True
    forms: dict[str, dict[str, Any]] = {
        "v0 base64": {
            "type": "audio",
            "source_type": "base64",
            "data": B64,
            "mime_type": "audio/wav",
        },
        "bare base64": {"type": "audio", "base64": B64},
        "input_audio": {"type": "input_audio", "input_audio": {"data": B64, "format": "wav"}},
    }
    for name, block in forms.items():
        answer = chat.invoke([HumanMessage(content=[block, {"type": "text", "text": QUESTION}])])
        assert answer.text == reference, name
        assert answer.usage_metadata is not None and answer.usage_metadata["input_tokens"] > 25
    by_url = [HumanMessage(content=[{"type": "audio", "url": server.url("/clip.wav")}, QUESTION])]
    server.hits.clear()
    with pytest.raises(AudioLoadError) as refused:
        chat.invoke(by_url)
    assert refused.value.reason == "remote-disabled" and server.hits == []
    allowed = chat.model_copy(update={"image_policy": LOCAL_HTTP})
    assert allowed.invoke(by_url).text == reference
    assert server.hits == ["/clip.wav"]


def test_langchain_text_model_refuses_audio_before_any_fetch(
    smollm_path: Path, server: LoopbackServer
) -> None:
    text_only = ChatLlamaCpp(model=str(smollm_path), temperature=0, max_tokens=4)
    assert text_only.profile is not None and text_only.profile.get("audio_inputs") is False
    permissive = text_only.model_copy(update={"image_policy": LOCAL_HTTP})
    server.hits.clear()
    with pytest.raises(AudioInputNotSupportedError):
        clip = {"type": "audio", "url": server.url("/clip.wav")}
        permissive.invoke([HumanMessage(content=[clip, "?"])])
    assert server.hits == []


def test_llama_index_audio_blocks(
    engine: Engine, reference: str, tmp_path: Path, server: LoopbackServer
) -> None:
    llm = LlamaCpp(engine=engine, temperature=0, max_tokens=6)
    assert llm.metadata.audio_inputs is True
    clip = tmp_path / "clip.wav"
    clip.write_bytes(WAV)
    allowed = llm.model_copy(
        update={"image_policy": ImagePolicy(allowed_dirs=(tmp_path,), **LOCAL_HTTP_FIELDS)}
    )
    blocks = {
        "bytes": AudioBlock(audio=WAV, format="wav"),
        "path": AudioBlock(path=clip),
        "url": AudioBlock(url=server.url("/clip.wav")),
    }
    for name, block in blocks.items():
        answer = allowed.chat([ChatMessage(role="user", blocks=[block, TextBlock(text=QUESTION)])])
        assert answer.message.content == reference, name
    with pytest.raises(AudioLoadError) as refused:
        llm.chat([ChatMessage(role="user", blocks=[AudioBlock(path=clip), TextBlock(text="?")])])
    assert refused.value.reason == "path-not-allowed"


def test_server_input_audio(engine: Engine, reference: str) -> None:
    client = TestClient(create_app(engine))
    part = {"type": "input_audio", "input_audio": {"data": B64, "format": "wav"}}
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [part, {"type": "text", "text": QUESTION}]}],
        "temperature": 0,
        "max_tokens": 6,
    }
    answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == reference
    responses = client.post(
        "/v1/responses",
        json={
            "model": "m",
            "input": [
                {"role": "user", "content": [part, {"type": "input_text", "text": QUESTION}]}
            ],
            "temperature": 0,
            "max_output_tokens": 6,
        },
    )
    assert responses.status_code == 200, responses.text
    three_hours = b"fLaC" + bytes([0x80, 0, 0, 34]) + bytes(10)
    three_hours += ((16000 << 44) | (15 << 36) | 3 * 3600 * 16000).to_bytes(8, "big") + bytes(16)
    hostile = {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(three_hours).decode()},
    }
    refused = client.post(
        "/v1/chat/completions",
        json={
            **body,
            "messages": [{"role": "user", "content": [hostile, {"type": "text", "text": "?"}]}],
        },
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "audio_load_failed:too-long"
