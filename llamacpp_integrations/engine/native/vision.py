"""The libmtmd boundary: a multimodal projector beside the text model, and media prompts.

A projector (``mmproj`` GGUF) turns an image into embeddings in the text model's input space.
``VisionProjector.tokenize`` cuts a prompt holding media markers into text tokens and image
chunks (``MediaPrompt``); the worker later evaluates each image chunk into the request's own
sequence with ``evaluate``, between its batched text decodes.

In a ``MediaPrompt`` every position an image takes holds one negative *image key*, derived from
the image's pixels. The scheduler compares prompts with cached cells position by position, so
the same image in the same place matches (its cells are reused) and any other image does not.

Audio goes the same way: an ``AudioInput`` (checked WAV, FLAC or MP3 bytes) is decoded and
resampled to the projector's rate by libmtmd's helper (miniaudio), and its *audio key* is
derived from the decoded samples, so the same clip shares cells whatever container carried it.

Tokenizing runs on callers' threads (as llama.cpp's server does it on its HTTP threads): it only
preprocesses pixels and reads the projector's settings. Loading, evaluating and freeing the
projector happen on the worker thread.
"""

from __future__ import annotations

import ctypes
import hashlib
import secrets
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
from llama_cpp import mtmd_cpp

from ...errors import (
    AudioInputNotSupportedError,
    AudioLoadError,
    EngineClosedError,
    EngineError,
    ImageInputNotSupportedError,
    InvalidRequestError,
    ModelLoadError,
)
from ...prompts.media import AudioInput, ImageInput, MediaInput
from .llama_log import ROUTER
from .runner import GenerationContext
from .weights import LoadedModel

__all__ = ["MediaPrompt", "MediaSpan", "VisionProjector", "audio_key", "image_key"]

_KEY_SPACE = 1 << 62


def image_key(image: ImageInput) -> int:
    """A negative number naming the image's pixels (never a token id)."""
    digest = hashlib.blake2b(image.rgb, digest_size=8, person=b"llamacpp-img")
    digest.update(f"{image.width}x{image.height}".encode())
    return -1 - int.from_bytes(digest.digest(), "little") % _KEY_SPACE


def audio_key(samples: bytes) -> int:
    """A negative number naming decoded audio samples (never a token id, nor an image key)."""
    digest = hashlib.blake2b(samples, digest_size=8, person=b"llamacpp-aud")
    return -1 - int.from_bytes(digest.digest(), "little") % _KEY_SPACE


@dataclass(frozen=True)
class MediaSpan:
    """One image chunk of a prompt: ``n_pos`` positions from ``start``, ``n_tokens`` embeddings.

    Most models use one position per embedding; M-RoPE models (Qwen2-VL and kin) use fewer.
    """

    start: int
    n_pos: int
    n_tokens: int
    chunk: int  # a ``const mtmd_input_chunk *`` owned by the prompt's chunk list


class MediaPrompt:
    """A tokenized prompt with images: positions (token ids or image keys) and image spans.

    Owns the libmtmd chunk list (which holds the preprocessed pixels) until ``close``, or until
    it is garbage collected.
    """

    def __init__(self, chunks: int, positions: list[int], spans: list[MediaSpan]) -> None:
        self.positions = tuple(positions)
        self.spans = {span.start: span for span in spans}
        self.n_image_tokens = sum(span.n_tokens for span in spans)
        self._free = weakref.finalize(self, mtmd_cpp.mtmd_input_chunks_free, chunks)

    @property
    def n_tokens(self) -> int:
        """KV cells the prompt takes: text tokens plus image embeddings."""
        return len(self.positions) - sum(s.n_pos for s in self.spans.values()) + self.n_image_tokens

    def in_image(self, position: int) -> bool:
        return any(s.start <= position < s.start + s.n_pos for s in self.spans.values())

    def tokens_before(self, n_positions: int) -> int:
        """KV cells taken by the first ``n_positions`` positions (images counted whole)."""
        cells = n_positions
        for span in self.spans.values():
            if span.start < n_positions:
                cells += span.n_tokens - span.n_pos
        return cells

    def close(self) -> None:
        self._free()


class VisionProjector:
    """A loaded projector bound to one text model. Built and freed on the worker thread."""

    def __init__(self, path: Path, model: LoadedModel, *, n_threads: int, use_gpu: bool) -> None:
        ROUTER.install_mtmd()
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False  # the first image pays for graph setup; loading stays quick
        # A marker user text cannot guess: text that holds libmtmd's default "<__media__>"
        # must stay text, not become a request for a missing image (or a smuggled one).
        self.marker = f"<__media_{secrets.token_hex(8)}__>"
        self._marker_bytes = self.marker.encode()  # kept alive: params holds its pointer
        params.media_marker = self._marker_bytes
        ctx = mtmd_cpp.mtmd_init_from_file(str(path).encode("utf-8"), model.handle, params)
        if not ctx:
            raise ModelLoadError(
                str(path),
                "libmtmd could not load this projector for the model (is it the projector of "
                "this model family, with the same embedding width? see the debug log)",
            )
        self._ctx = ctx
        self._lock = threading.Lock()
        self.supports_vision = bool(mtmd_cpp.mtmd_support_vision(ctx))
        rate = int(mtmd_cpp.mtmd_get_audio_sample_rate(ctx))
        self.audio_sample_rate = rate if mtmd_cpp.mtmd_support_audio(ctx) and rate > 0 else None
        if not self.supports_vision and self.audio_sample_rate is None:
            self.close()
            raise ModelLoadError(
                str(path), "this projector has neither an image nor an audio encoder"
            )
        self.path = path
        self.uses_mrope = bool(mtmd_cpp.mtmd_decode_use_mrope(ctx))
        self._n_vocab = model.n_vocab
        if self.supports_vision:
            self._check_image_wrapping()

    def _check_image_wrapping(self) -> None:
        """Refuse a projector whose image wrapping the model cannot spell.

        Some families put their own special tokens around an image (SmolVLM's
        ``<global-img>``, ...). Beside a text model whose vocabulary lacks them libmtmd emits
        token id -1, and evaluating that crashes the process: find out now, with a probe image.
        """
        probe = ImageInput(8, 8, b"\x80" * (8 * 8 * 3))
        try:
            self.tokenize(self.marker + ".", [probe], add_special=False, request_id="probe").close()
        except InvalidRequestError as error:
            self.close()
            raise ModelLoadError(
                str(self.path), f"this projector does not fit the model: {error}"
            ) from None

    def tokenize(
        self, text: str, images: Sequence[MediaInput], *, add_special: bool, request_id: str
    ) -> MediaPrompt:
        """Cut ``text`` at its markers (one per image or clip, in order) into tokens and media
        chunks."""
        count = text.count(self.marker)
        if count != len(images):
            raise InvalidRequestError(
                f"the prompt places {count} media item(s) but {len(images)} were given",
                request_id=request_id,
            )
        bitmaps: list[int] = []
        chunks = mtmd_cpp.mtmd_input_chunks_init()
        try:
            for item in images:
                bitmaps.append(self._media_bitmap(item, request_id))
            data = text.encode("utf-8")
            text_input = mtmd_cpp.mtmd_input_text(data, len(data), add_special, True)
            array = (mtmd_cpp.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            # The lock keeps ``close`` (worker thread) from freeing the context mid-call.
            with self._lock:
                if not self._ctx:
                    raise EngineClosedError("the engine is closed", request_id=request_id)
                code = mtmd_cpp.mtmd_tokenize(
                    self._ctx, chunks, ctypes.byref(text_input), array, len(bitmaps)
                )
        except BaseException:
            mtmd_cpp.mtmd_input_chunks_free(chunks)
            raise
        finally:
            for bitmap in bitmaps:
                mtmd_cpp.mtmd_bitmap_free(bitmap)
        if code != 0:
            mtmd_cpp.mtmd_input_chunks_free(chunks)
            why = {1: "the number of images and markers differ", 2: "an image failed to preprocess"}
            raise InvalidRequestError(
                f"libmtmd could not tokenize the prompt: {why.get(code, f'code {code}')}",
                request_id=request_id,
            )
        media = _read_chunks(chunks)
        text_tokens = (t for i, t in enumerate(media.positions) if not media.in_image(i))
        if any(not 0 <= token < self._n_vocab for token in text_tokens):
            media.close()
            raise InvalidRequestError(
                "libmtmd wrapped the image in tokens this model's vocabulary lacks (the "
                "projector belongs to another model)",
                request_id=request_id,
            )
        return media

    def _media_bitmap(self, item: MediaInput, request_id: str) -> int:
        if isinstance(item, AudioInput):
            return self._audio_bitmap(item, request_id)
        if not self.supports_vision:
            raise ImageInputNotSupportedError(
                "this projector reads audio only, not images", request_id=request_id
            )
        return self._bitmap(item)

    def _audio_bitmap(self, clip: AudioInput, request_id: str) -> int:
        """Decode and resample the clip with libmtmd's helper; its id becomes the samples' key."""
        rate = self.audio_sample_rate
        if rate is None:
            raise AudioInputNotSupportedError(
                "this projector reads images only, not audio", request_id=request_id
            )
        data = (ctypes.c_uint8 * len(clip.data)).from_buffer_copy(clip.data)
        with self._lock:
            if not self._ctx:
                raise EngineClosedError("the engine is closed", request_id=request_id)
            bitmap = mtmd_cpp.mtmd_helper_bitmap_init_from_buf(self._ctx, data, len(data), False)
        if not bitmap:
            raise AudioLoadError(
                f"libmtmd could not decode the {clip.format} clip", reason="decode-failed"
            )
        try:
            n_bytes = int(mtmd_cpp.mtmd_bitmap_get_n_bytes(bitmap))
            # What the header promised, at the projector's rate, with a second of slack for
            # resampling and frame padding: more samples than that means the header lied.
            most = (clip.duration_s + 1.0) * rate * 4
            if not mtmd_cpp.mtmd_bitmap_is_audio(bitmap) or n_bytes == 0 or n_bytes > most:
                raise AudioLoadError(
                    f"the {clip.format} clip decoded to {n_bytes // 4} samples, not the "
                    f"{clip.duration_s:.2f} s its header states",
                    reason="decode-failed",
                )
            samples = ctypes.string_at(mtmd_cpp.mtmd_bitmap_get_data(bitmap), n_bytes)
            mtmd_cpp.mtmd_bitmap_set_id(bitmap, str(audio_key(samples)).encode())
        except BaseException:
            mtmd_cpp.mtmd_bitmap_free(bitmap)
            raise
        return bitmap

    @staticmethod
    def _bitmap(image: ImageInput) -> int:
        data = (ctypes.c_uint8 * len(image.rgb)).from_buffer_copy(image.rgb)
        bitmap = mtmd_cpp.mtmd_bitmap_init(image.width, image.height, data)
        if not bitmap:
            raise EngineError("libmtmd could not allocate an image")
        mtmd_cpp.mtmd_bitmap_set_id(bitmap, str(image_key(image)).encode())
        return bitmap  # type: ignore[no-any-return]

    def evaluate(
        self, context: GenerationContext, span: MediaSpan, *, seq_id: int, n_past: int
    ) -> int:
        """Encode the image and decode its embeddings into ``seq_id`` from position ``n_past``.

        Returns 0, or llama.cpp's code: 1 when the KV cache had no room, anything else when
        encoding or decoding failed (the sequence may then hold part of the image).
        """
        new_n_past = llama_cpp.llama_pos(0)
        return int(
            mtmd_cpp.mtmd_helper_eval_chunk_single(
                self._ctx,
                context.handle,
                span.chunk,
                n_past,
                seq_id,
                context.n_batch,
                False,  # libmtmd keeps no logits for image embeddings; prompts never end on one
                ctypes.byref(new_n_past),
            )
        )

    def close(self) -> None:
        with self._lock:
            if self._ctx:
                mtmd_cpp.mtmd_free(self._ctx)
                self._ctx = None


def _read_chunks(chunks: int) -> MediaPrompt:
    positions: list[int] = []
    spans: list[MediaSpan] = []
    for index in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
        chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, index)
        if mtmd_cpp.mtmd_input_chunk_get_type(chunk) == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t(0)
            tokens = mtmd_cpp.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            positions.extend(tokens[: n.value] if tokens else ())
            continue
        # Some projectors cut one image into several chunks (tiles, then the overview); each
        # chunk carries the id of its image, which ``tokenize`` set to the image's key.
        span = MediaSpan(
            start=len(positions),
            n_pos=int(mtmd_cpp.mtmd_input_chunk_get_n_pos(chunk)),
            n_tokens=int(mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk)),
            chunk=chunk,
        )
        spans.append(span)
        positions.extend([int(mtmd_cpp.mtmd_input_chunk_get_id(chunk) or b"-1")] * span.n_pos)
    return MediaPrompt(chunks, positions, spans)
