"""``load_audio``: every source kind, and hostile clips refused by their headers, typed.

Clips are made here (WAV with the stdlib's ``wave``; FLAC and MP3 headers by hand), the network
is an ``http.server`` on 127.0.0.1, and nothing is ever decoded: these checks run before the
engine's decoder sees a byte.
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

import pytest

from llamacpp_integrations.errors import AudioLoadError, InvalidRequestError
from llamacpp_integrations.multimodal import (
    AudioInput,
    AudioLimits,
    ImagePolicy,
    audio_reader_for,
    load_audio,
)
from llamacpp_integrations.multimodal.audio_headers import read_header, sniff_audio
from tests.loopback_http import LoopbackServer, serving


def wav(seconds: float = 0.5, rate: int = 8000, channels: int = 1) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        frames = int(seconds * rate)
        w.writeframes(
            b"".join(
                struct.pack("<h", int(3000 * math.sin(i / 7))) * channels for i in range(frames)
            )
        )
    return out.getvalue()


def flac_header(total_samples: int, rate: int = 16000) -> bytes:
    """A FLAC stream's marker and STREAMINFO (no frames): enough for the header checks."""
    packed = (rate << 44) | (0 << 41) | (15 << 36) | total_samples  # mono, 16 bits
    info = struct.pack(">HH", 4096, 4096) + b"\x00" * 6 + packed.to_bytes(8, "big") + b"\x00" * 16
    return b"fLaC" + bytes([0x80, 0, 0, 34]) + info


def mp3_frames(n: int) -> bytes:
    """``n`` MPEG-1 Layer III frames, 128 kbit/s, 44.1 kHz, mono: 417 bytes each."""
    header = bytes([0xFF, 0xFB, 0x90, 0xC0])
    return (header + b"\x00" * (417 - 4)) * n


WAV = wav()


def test_every_in_memory_source_gives_the_same_clip() -> None:
    b64 = base64.b64encode(WAV).decode()
    sources: list[object] = [
        WAV,
        bytearray(WAV),
        memoryview(WAV),
        f"data:audio/wav;base64,{b64}",
        f"DATA:AUDIO/X-WAV;BASE64,{b64}",
        b64,
        AudioInput(data=WAV, format="wav", duration_s=0.5),
    ]
    for source in sources:
        clip = load_audio(source)  # type: ignore[arg-type]
        assert clip.data == WAV and clip.format == "wav"
        assert clip.duration_s == pytest.approx(0.5)


def test_formats_are_told_by_their_bytes() -> None:
    assert sniff_audio(WAV) == "wav"
    assert sniff_audio(flac_header(16000)) == "flac"
    assert sniff_audio(b"ID3\x04\x00\x00\x00\x00\x00\x00" + mp3_frames(1)) == "mp3"
    assert sniff_audio(b"PK\x03\x04" + b"\x00" * 40) is None
    stereo = load_audio(wav(0.25, rate=22050, channels=2))
    assert stereo.duration_s == pytest.approx(0.25, abs=1e-3)
    assert load_audio(flac_header(48000)).duration_s == pytest.approx(3.0)
    mp3 = load_audio(mp3_frames(10) + b"TAG" + b"\x00" * 125)
    assert mp3.format == "mp3" and mp3.duration_s == pytest.approx(10 * 1152 / 44100)


def test_pcm_samples_become_a_float_wav() -> None:
    samples = struct.pack("<4f", 0.0, 0.5, -0.5, 0.25) * 400
    clip = AudioInput.from_pcm(samples, 16000)
    assert clip.format == "wav" and clip.duration_s == pytest.approx(0.1)
    assert load_audio(clip.data).duration_s == pytest.approx(0.1)
    with pytest.raises(InvalidRequestError):
        AudioInput.from_pcm(b"\x00" * 3, 16000)


def _reason(source: object, policy: ImagePolicy | None = None, **limits: object) -> str:
    with pytest.raises(AudioLoadError) as caught:
        load_audio(source, policy or ImagePolicy(), AudioLimits(**limits))  # type: ignore[arg-type]
    return caught.value.reason


def test_a_three_hour_clip_is_refused_by_its_header() -> None:
    three_hours = flac_header(3 * 3600 * 16000)  # 42 bytes that announce 3 hours
    assert _reason(three_hours) == "too-long"
    with pytest.raises(AudioLoadError, match="600-second limit"):
        load_audio(three_hours)
    assert _reason(wav(2.0), max_duration_s=1.0) == "too-long"


def test_a_huge_header_is_refused_before_any_decoding() -> None:
    head = bytearray(wav(0.01))
    data_at = head.index(b"data")
    struct.pack_into("<I", head, data_at + 4, 0xFFFFFFF0)  # 4 GiB of samples, none present
    assert _reason(bytes(head)) == "too-long"
    struct.pack_into("<I", head, data_at + 4, 16000)  # one second announced, 0.01 s present
    assert _reason(bytes(head)) == "truncated"


def test_a_truncated_file_is_refused() -> None:
    assert _reason(WAV[:30]) == "decode-failed"  # cut inside the fmt chunk
    assert _reason(WAV[: len(WAV) // 2]) == "truncated"
    assert _reason(b"fLaC\x00\x00\x00\x22") == "decode-failed"
    assert _reason(mp3_frames(3) + b"\x00" * 200) == "decode-failed"  # bytes no frame accounts for


def test_a_zip_bomb_in_disguise_is_refused() -> None:
    zipped = b"PK\x03\x04" + b"\x14\x00" * 20 + b"\x00" * 1000
    assert _reason(zipped) == "bad-content-type"
    disguised = "data:audio/wav;base64," + base64.b64encode(zipped).decode()
    assert _reason(disguised) == "bad-content-type"
    # A FLAC of silence compresses hours into kilobytes: its header says so first.
    assert _reason(flac_header(2**35)) == "too-long"


def test_other_refusals_name_their_limit() -> None:
    with pytest.raises(AudioLoadError, match="1000-byte limit") as caught:
        load_audio(WAV, ImagePolicy(), AudioLimits(max_bytes=1000))
    assert caught.value.reason == "too-large"
    assert _reason(b"") == "empty"
    assert _reason("   ") == "empty"
    assert _reason(f"data:text/plain;base64,{base64.b64encode(WAV).decode()}") == (
        "bad-content-type"
    )
    adpcm = bytearray(WAV)
    struct.pack_into("<H", adpcm, adpcm.index(b"fmt ") + 8, 2)  # MS ADPCM
    assert _reason(bytes(adpcm)) == "bad-content-type"
    assert _reason("ftp://example.com/a.wav") == "scheme-refused"
    assert _reason(12) == "bad-source"
    assert _reason(flac_header(0)) == "decode-failed"  # length unknown


def test_paths_only_under_allowed_directories(tmp_path: Path) -> None:
    (tmp_path / "a.wav").write_bytes(WAV)
    assert _reason(str(tmp_path / "a.wav")) == "path-not-allowed"
    clip = load_audio(tmp_path / "a.wav", ImagePolicy(allowed_dirs=(tmp_path,)))
    assert clip.data == WAV
    outside = tmp_path.parent / "elsewhere.wav"
    assert _reason(outside, ImagePolicy(allowed_dirs=(tmp_path,))) == "path-not-allowed"


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        server = self.server
        assert isinstance(server, LoopbackServer)
        server.hits.append(self.path)
        body = WAV if self.path == "/a.wav" else b"<html></html>"
        self.send_response(200)
        self.send_header("Content-Type", "audio/wav" if self.path == "/a.wav" else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with serving(_Handler) as httpd:
        yield httpd


def test_urls_follow_the_image_policy(server: LoopbackServer) -> None:
    url = server.url("/a.wav")
    server.hits.clear()
    assert _reason(url) == "remote-disabled"
    assert _reason(url, ImagePolicy(allow_remote=True)) == "private-address"
    assert _reason(url.replace("127.0.0.1", "localhost"), ImagePolicy(allow_remote=True)) == (
        "private-address"
    )
    assert server.hits == []  # refused without a fetch
    local = ImagePolicy(allow_remote=True, allow_private_networks=True)
    assert load_audio(url, local).data == WAV
    assert _reason(url.replace("a.wav", "page"), local) == "bad-content-type"
    assert server.hits == ["/a.wav", "/page"]


def test_header_reader_checks_duration_before_length() -> None:
    head = bytearray(wav(0.01))
    struct.pack_into("<I", head, head.index(b"data") + 4, 0x7FFFFFFF)
    with pytest.raises(AudioLoadError) as caught:
        read_header(bytes(head), "clip", max_duration_s=10.0)
    assert caught.value.reason == "too-long"


def test_reader_for_a_model_without_audio_is_none() -> None:
    from llamacpp_integrations.engine import ModelInfo

    info = ModelInfo(
        path="m.gguf",
        name=None,
        architecture="llama",
        description="",
        n_ctx_train=2048,
        n_ctx_per_seq=2048,
        n_embd=576,
        n_vocab=100,
        n_params=1,
        size_bytes=1,
        chat_template=None,
        mmproj="p.gguf",
    )
    assert audio_reader_for(info, ImagePolicy()) is None
    listening = audio_reader_for(
        ModelInfo(**{**info.__dict__, "audio_sample_rate": 16000}), ImagePolicy()
    )
    assert listening is not None and listening(WAV).format == "wav"
