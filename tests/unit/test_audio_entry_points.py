"""Audio through the entry points' translations, without a model: the server's ``input_audio``,
LangChain's and LlamaIndex's audio blocks, the remote engine's payload and server description,
and the server's error codes. The reader is a ``MediaReader`` for a model described by hand."""

from __future__ import annotations

import base64
import io
import struct
import wave
from dataclasses import replace
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from llama_index.core.base.llms.types import AudioBlock, ChatMessage, TextBlock

from llamacpp_integrations.engine import AudioInput, CompletionRequest
from llamacpp_integrations.errors import (
    AudioInputNotSupportedError,
    AudioLoadError,
    ImageInputNotSupportedError,
)
from llamacpp_integrations.langchain.messages import to_engine_messages as langchain_messages
from llamacpp_integrations.llama_index.messages import to_engine_message
from llamacpp_integrations.multimodal import ImagePolicy, MediaReader, media_reader_for
from llamacpp_integrations.remote.payload import completion_body, encode_media
from llamacpp_integrations.remote.server_info import describe_server
from llamacpp_integrations.server.chat_messages import messages_reader
from llamacpp_integrations.server.errors import api_error_of

from .tiny_model import INFO


def _wav() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(struct.pack("<800h", *range(800)))
    return out.getvalue()


WAV = _wav()
B64 = base64.b64encode(WAV).decode()
LISTENING = replace(INFO, mmproj="audio.gguf", vision_encoder=False, audio_sample_rate=16000)


def reader(info: Any = LISTENING) -> MediaReader:
    made = media_reader_for(info, ImagePolicy())
    assert made is not None
    return made


def test_media_readers_follow_the_projector() -> None:
    assert media_reader_for(INFO, ImagePolicy()) is None  # no projector: nothing is read
    assert LISTENING.supports_audio and not LISTENING.supports_images
    with pytest.raises(ImageInputNotSupportedError):
        reader()("data:image/png;base64,AAAA")
    seeing = reader(replace(INFO, mmproj="vision.gguf"))
    with pytest.raises(AudioInputNotSupportedError):
        seeing.audio(WAV)
    assert reader().audio(WAV).format == "wav"


def test_server_input_audio_parts() -> None:
    part = {"type": "input_audio", "input_audio": {"data": B64, "format": "wav"}}
    messages = [{"role": "user", "content": [part, {"type": "text", "text": "?"}]}]
    out = messages_reader(messages)(reader())
    clip = out[0]["content"][0]["audio"]
    assert isinstance(clip, AudioInput) and clip.data == WAV
    with pytest.raises(AudioInputNotSupportedError):
        messages_reader(messages)(None)
    ogg = [
        {
            "role": "user",
            "content": [{"type": "input_audio", "input_audio": {"data": B64, "format": "ogg"}}],
        }
    ]
    with pytest.raises(AudioLoadError) as caught:
        messages_reader(ogg)(reader())
    assert caught.value.reason == "bad-content-type"
    assert api_error_of(caught.value).code == "audio_load_failed:bad-content-type"
    assert api_error_of(AudioInputNotSupportedError("no")).code == "audio_not_supported"


@pytest.mark.parametrize(
    "block",
    [
        {"type": "audio", "base64": B64, "mime_type": "audio/wav"},
        {"type": "audio", "base64": B64},
        {"type": "audio", "source_type": "base64", "data": B64, "mime_type": "audio/x-wav"},
        {"type": "input_audio", "input_audio": {"data": B64, "format": "wav"}},
    ],
)
def test_langchain_audio_blocks(block: dict[str, Any]) -> None:
    out = langchain_messages([HumanMessage(content=[block, "?"])], reader())
    assert out[0]["content"][0]["audio"].data == WAV


def test_langchain_file_ids_and_missing_data_are_refused() -> None:
    from llamacpp_integrations.errors import UnsupportedContentError

    for block in ({"type": "audio", "file_id": "f-1"}, {"type": "audio"}):
        with pytest.raises(UnsupportedContentError):
            langchain_messages([HumanMessage(content=[block])], reader())


def test_llama_index_audio_block() -> None:
    message = ChatMessage(role="user", blocks=[AudioBlock(audio=WAV), TextBlock(text="?")])
    part = to_engine_message(message, reader()).content[0]
    assert isinstance(part, dict) and part["audio"].data == WAV
    with pytest.raises(AudioInputNotSupportedError, match="AudioBlock"):
        to_engine_message(message, None)


def test_remote_payload_and_description() -> None:
    clip = AudioInput(data=WAV, format="wav", duration_s=0.05)
    assert base64.b64decode(encode_media(clip)) == WAV
    body = completion_body(CompletionRequest(prompt="<m> hi", images=[clip]), "<m> hi", [clip])
    assert body["prompt"]["multimodal_data"] == [B64]
    props = {
        "model_path": "/models/m.gguf",
        "modalities": {"vision": False, "audio": True},
        "media_marker": "<m>",
        "default_generation_settings": {"n_ctx": 512},
    }
    desc = describe_server("http://server.test", props, {"data": []})
    assert desc.info.supports_audio and not desc.info.supports_images
    assert desc.media_marker == "<m>"
