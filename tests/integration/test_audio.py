"""The engine's audio path on SmolLM2-135M with a tiny random-weight Ultravox projector.

The projector (``tests/builders/tiny_audio_projector.py``) has random weights: these tests prove
the plumbing (libmtmd decodes and resamples the clip, encodes it, its embeddings are decoded into
the request's sequence in the prompt's layout, counted in usage and shared between requests that
carry the same samples), never what the model "hears".
"""

from __future__ import annotations

import io
import math
import struct
import wave
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from llamacpp_integrations.engine import (
    AudioInput,
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.errors import (
    AudioInputNotSupportedError,
    AudioLoadError,
    ImageInputNotSupportedError,
)
from llamacpp_integrations.multimodal import load_audio, load_image
from tests.builders.tiny_audio_projector import TOKENS_PER_CHUNK
from tests.conftest import _RECORDED_HOSTS, remote_is_live
from tests.integration.helpers import idle_and_freed, repeat_kept_all, wait_for
from tests.live.remote_servers import LLAMA_SERVER, RECORDED_URL, llama_server

GREEDY = SamplingParams(temperature=0.0)


def tone(hz: float, seconds: float = 0.5, rate: int = 8000) -> bytes:
    """A 16-bit mono WAV of a sine tone."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        n = int(seconds * rate)
        w.writeframes(
            b"".join(
                struct.pack("<h", int(12000 * math.sin(2 * math.pi * hz * i / rate)))
                for i in range(n)
            )
        )
    return out.getvalue()


def ask(clip: AudioInput, question: str = "What do you hear?", max_tokens: int = 6) -> ChatRequest:
    content: list[dict[str, object]] = [
        {"type": "audio", "audio": clip},
        {"type": "text", "text": question},
    ]
    return ChatRequest(
        messages=[ChatMessage(role="user", content=content)], sampling=GREEDY, max_tokens=max_tokens
    )


@pytest.fixture(scope="module")
def listening(smollm_path: Path, audio_projector: Path) -> Iterator[Engine]:
    config = EngineConfig(
        model=str(smollm_path), mmproj=str(audio_projector), n_seq_max=3, n_ctx_per_seq=512
    )
    with Engine(config) as engine:
        yield engine


def test_engine_reports_audio_support(listening: Engine) -> None:
    assert listening.info.supports_audio and listening.info.audio_sample_rate == 16000
    assert not listening.info.supports_images


def test_a_clip_is_evaluated_in_place_and_counted(listening: Engine) -> None:
    clip = load_audio(tone(440))
    done = listening.generate(ask(clip))
    assert done.usage.prompt_image_tokens == TOKENS_PER_CHUNK  # media embeddings, audio's too
    positions = listening.prompt_tokens(ask(clip))
    keys = [t for t in positions if t < 0]
    # One clip: one key over its positions, with text on both sides of it.
    assert len(set(keys)) == 1 and positions[0] >= 0 and positions[-1] >= 0
    assert done.usage.prompt_tokens == len(positions)
    assert idle_and_freed(wait_for(listening, idle_and_freed))


def test_the_same_samples_share_cells_whatever_the_container(listening: Engine) -> None:
    listening.clear_cache()
    wav_clip = load_audio(tone(330))
    first = listening.generate(ask(wav_clip))
    # The same samples as 32-bit float PCM: another file, the same decoded clip.
    with wave.open(io.BytesIO(wav_clip.data)) as w:
        pcm = w.readframes(w.getnframes())
    floats = b"".join(struct.pack("<f", s / 32768) for (s,) in struct.iter_unpack("<h", pcm))
    again = listening.generate(ask(AudioInput.from_pcm(floats, 8000)))
    # All but the prompt's last chunk (the question and the assistant's header) is kept.
    assert repeat_kept_all(again)
    assert again.token_ids == first.token_ids
    other = listening.generate(ask(load_audio(tone(990))))
    end_of_clip = max(i for i, t in enumerate(listening.prompt_tokens(ask(wav_clip))) if t < 0)
    assert other.usage.cached_prompt_tokens < end_of_clip  # another clip: its cells are not taken


def test_a_clip_is_restored_from_the_disk_cache_by_its_samples(
    smollm_path: Path, audio_projector: Path, tmp_path: Path
) -> None:
    def engine() -> Engine:
        return Engine(
            EngineConfig(
                model=str(smollm_path),
                mmproj=str(audio_projector),
                n_seq_max=1,
                n_ctx_per_seq=512,
                prompt_cache_dir=str(tmp_path),
                prompt_cache_min_tokens=32,
            )
        )

    clip = load_audio(tone(660))
    with engine() as first:
        cold = first.generate(ask(clip))
    assert cold.usage.cached_prompt_tokens == 0 and list(tmp_path.glob("*.kvstate"))
    with engine() as restarted:
        same = restarted.generate(ask(load_audio(tone(660))))
        other = restarted.generate(ask(load_audio(tone(770))))
    assert repeat_kept_all(same)
    assert other.usage.cached_prompt_tokens < other.usage.prompt_tokens - TOKENS_PER_CHUNK


def test_raw_completion_places_clips_with_the_marker(listening: Engine) -> None:
    marker = listening.media_marker
    assert marker is not None
    request = CompletionRequest(
        prompt=f"Audio: {marker}\nTranscript:",
        images=[load_audio(tone(550))],
        sampling=GREEDY,
        max_tokens=4,
    )
    done = listening.generate(request)
    assert done.usage.prompt_image_tokens == TOKENS_PER_CHUNK


def test_bad_audio_requests_fail_typed_and_the_engine_keeps_serving(listening: Engine) -> None:
    # A header that passed the loader's checks (it was built by hand) but decodes to nothing.
    lying = AudioInput(data=b"RIFF\x00\x00\x00\x00WAVEjunk", format="wav", duration_s=1.0)
    with pytest.raises(AudioLoadError):
        listening.generate(ask(lying))
    picture = load_image(_png())
    with pytest.raises(ImageInputNotSupportedError):
        listening.generate(
            ChatRequest(
                messages=[
                    ChatMessage(
                        role="user",
                        content=[
                            {"type": "image", "image": picture},
                            {"type": "text", "text": "?"},
                        ],
                    )
                ],
                max_tokens=2,
            )
        )
    assert listening.generate(ask(load_audio(tone(440)))).usage.completion_tokens > 0


def _png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(out, format="PNG")
    return out.getvalue()


def test_text_engine_refuses_audio_typed(engine: Engine) -> None:
    with pytest.raises(AudioInputNotSupportedError, match="audio projector"):
        engine.generate(ask(load_audio(tone(440))))


@pytest.fixture(scope="module")
def audio_server(
    request: pytest.FixtureRequest, smollm_path: Path, audio_projector: Path
) -> Iterator[str]:
    """A llama-server with the tiny audio projector, or the recorded URL when cassettes answer."""
    if not remote_is_live(request.config):
        yield RECORDED_URL
        return
    if not LLAMA_SERVER.exists():
        pytest.skip(f"no llama-server at {LLAMA_SERVER} (make llama-server)")
    args = ["--mmproj", str(audio_projector)]
    with llama_server(smollm_path, slots=2, n_ctx_per_slot=512, args=args) as url:
        _RECORDED_HOSTS[url] = RECORDED_URL
        yield url


@pytest.mark.vcr
@pytest.mark.remote
def test_remote_engine_sends_clips_to_llama_server(audio_server: str, listening: Engine) -> None:
    """llama-server decodes the clip with the same libmtmd helper: the same prompt size."""
    from llamacpp_integrations.remote import RemoteEngine

    clip = load_audio(tone(440))
    with RemoteEngine(audio_server) as remote:
        assert remote.info.supports_audio and not remote.info.supports_images
        done = remote.generate(ask(clip))
        with pytest.raises(ImageInputNotSupportedError):
            remote.generate(replace(ask(clip), messages=[_image_message()]))
    listening.clear_cache()
    assert done.usage.prompt_tokens == listening.generate(ask(clip)).usage.prompt_tokens


def _image_message() -> ChatMessage:
    picture = load_image(_png())
    return ChatMessage(
        role="user", content=[{"type": "image", "image": picture}, {"type": "text", "text": "?"}]
    )
