"""Reading an audio file's header, without decoding it: its format, by its bytes, and its length.

Decoding (libmtmd's helper, miniaudio) sizes its output from what the header states, and a
small file can state hours: a FLAC of silence compresses three hours into well under a
megabyte, and a WAV header can claim four gigabytes of data that are not there. So the length
is read here first, and the clip refused before any sample is decoded when it is over the cap
or its header promises more than the file holds.

* WAV (``RIFF``/``WAVE``): integer PCM or IEEE float (plain or ``WAVE_FORMAT_EXTENSIBLE``);
  the ``data`` chunk's size over the block size gives the frames. A compressed codec (ADPCM,
  ...) is refused: its size says little about its length.
* FLAC (``fLaC``, after an optional ID3v2 tag): STREAMINFO's sample rate and total samples. A
  stream whose STREAMINFO leaves the total unknown (0) is refused.
* MP3 (an MPEG-1/2/2.5 Layer III frame sync, after an optional ID3v2 tag): every frame header
  is walked (frames have sizes fixed by their headers), summing samples. The frames must run
  to the end of the file, bar an ID3v1 or APE tag or a last cut-off frame: bytes the walk
  cannot account for could hide more frames that a resyncing decoder would find.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import AudioLoadError

__all__ = ["AudioHeader", "read_header", "sniff_audio"]

_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_MAX_CHUNKS = 64  # a WAV walked past this many chunks without its data is refused
_MP3_BITRATES = {  # kbit/s by bitrate index, Layer III
    1: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


@dataclass(frozen=True)
class AudioHeader:
    """What a clip's header states: ``format`` ("wav", "flac", "mp3"), ``sample_rate`` (Hz),
    ``channels`` and ``duration_s``."""

    format: str
    sample_rate: int
    channels: int
    duration_s: float


def sniff_audio(data: bytes) -> str | None:
    """The audio format ``data``'s first bytes announce (``None``: neither WAV, FLAC nor MP3)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    body = data[_id3_size(data) :]
    if body[:4] == b"fLaC":
        return "flac"
    if len(body) >= 4 and _mp3_frame(body, 0) is not None:
        return "mp3"
    return None


def read_header(data: bytes, what: str, *, max_duration_s: float) -> AudioHeader:
    """The header of ``data``, its duration held to ``max_duration_s`` and then its length to
    the bytes present; ``what`` names the source in errors."""
    fmt = sniff_audio(data)
    missing = 0
    if fmt == "wav":
        header, missing = _wav(data, what)
    elif fmt == "flac":
        header = _flac(data[_id3_size(data) :], what)
    elif fmt == "mp3":
        header = _mp3(data, what)
    else:
        raise AudioLoadError(
            f"{what} is not WAV, FLAC or MP3 by its bytes (starts {data[:8]!r})",
            reason="bad-content-type",
        )
    # The duration first: a header claiming hours is refused as too long, however short the file.
    if header.duration_s > max_duration_s:
        raise AudioLoadError(
            f"{what} is {header.duration_s:.1f} s long by its header, over the "
            f"{max_duration_s:g}-second limit",
            reason="too-long",
        )
    if missing:
        raise AudioLoadError(
            f"{what}: the header announces {missing} more bytes of samples than the file holds",
            reason="truncated",
        )
    if header.duration_s <= 0:
        raise AudioLoadError(f"{what} holds no samples", reason="empty")
    return header


def _bad(what: str, why: str) -> AudioLoadError:
    return AudioLoadError(f"{what}: {why}", reason="decode-failed")


def _id3_size(data: bytes) -> int:
    """Bytes an ID3v2 tag takes at the start of ``data`` (0: none)."""
    if data[:3] != b"ID3" or len(data) < 10:
        return 0
    size = 0
    for byte in data[6:10]:
        size = (size << 7) | (byte & 0x7F)  # "syncsafe": 7 bits a byte
    footer = 10 if data[5] & 0x10 else 0
    return 10 + size + footer


def _wav(data: bytes, what: str) -> tuple[AudioHeader, int]:
    """The header, and how many bytes of samples it announces past the end of ``data``."""
    offset = 12
    fmt: tuple[int, int, int, int] | None = None  # codec, channels, rate, block size
    for _ in range(_MAX_CHUNKS):
        if offset + 8 > len(data):
            break
        chunk_id = data[offset : offset + 4]
        (size,) = struct.unpack_from("<I", data, offset + 4)
        body = offset + 8
        if chunk_id == b"fmt ":
            fmt = _wav_format(data[body : body + size], what)
        elif chunk_id == b"data":
            if fmt is None:
                raise _bad(what, "the WAV data chunk comes before its fmt chunk")
            _codec, channels, rate, block = fmt
            header = AudioHeader("wav", rate, channels, size // block / rate)
            return header, max(0, size - (len(data) - body))
        offset = body + size + (size & 1)  # chunks are padded to even sizes
    raise _bad(what, "no WAV data chunk")


def _wav_format(body: bytes, what: str) -> tuple[int, int, int, int]:
    if len(body) < 16:
        raise _bad(what, "the WAV fmt chunk is too short")
    codec, channels, rate, _byte_rate, block, bits = struct.unpack_from("<HHIIHH", body)
    if codec == _EXTENSIBLE:
        if len(body) < 26:
            raise _bad(what, "the extensible WAV fmt chunk is too short")
        (codec,) = struct.unpack_from("<H", body, 24)  # the sub-format GUID's first field
    if codec not in (_PCM, _FLOAT):
        raise AudioLoadError(
            f"{what}: WAV codec {codec:#x} is compressed; only PCM and float WAV are read",
            reason="bad-content-type",
        )
    if not 1 <= channels <= 8 or not 1000 <= rate <= 384_000 or bits not in (8, 16, 24, 32, 64):
        raise _bad(what, f"WAV of {channels} channel(s), {rate} Hz, {bits} bits is not read")
    if block != channels * bits // 8:
        raise _bad(what, f"WAV block size {block} does not match {channels}x{bits} bits")
    return codec, channels, rate, block


def _flac(data: bytes, what: str) -> AudioHeader:
    # "fLaC", then metadata blocks; the first is STREAMINFO (type 0, 34 bytes).
    if len(data) < 8 + 34 or data[4] & 0x7F != 0:
        raise _bad(what, "the FLAC stream does not start with its STREAMINFO block")
    info = data[8 : 8 + 34]
    packed = int.from_bytes(info[10:18], "big")
    rate = packed >> 44
    channels = ((packed >> 41) & 0x7) + 1
    total = packed & ((1 << 36) - 1)
    if not 1000 <= rate <= 655_350:
        raise _bad(what, f"FLAC sample rate {rate} Hz is not read")
    if total == 0:
        raise _bad(what, "the FLAC header leaves the clip's length unknown")
    return AudioHeader("flac", rate, channels, total / rate)


def _mp3_frame(data: bytes, offset: int) -> tuple[int, int, int, int] | None:
    """(frame bytes, samples, sample rate, channels) of a Layer III frame header at ``offset``."""
    if offset + 4 > len(data):
        return None
    b1, b2, b3 = data[offset + 1], data[offset + 2], data[offset + 3]
    if data[offset] != 0xFF or b1 & 0xE0 != 0xE0:
        return None
    version = (b1 >> 3) & 0x3  # 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5
    layer = (b1 >> 1) & 0x3  # 1: Layer III
    bitrate_index, rate_index = b2 >> 4, (b2 >> 2) & 0x3
    if version == 1 or layer != 1 or bitrate_index in (0, 15) or rate_index == 3:
        return None
    kbps = _MP3_BITRATES[1 if version == 3 else 2][bitrate_index]
    rate = _MP3_RATES[version][rate_index]
    samples = 1152 if version == 3 else 576
    size = samples // 8 * kbps * 1000 // rate + ((b2 >> 1) & 0x1)
    channels = 1 if b3 >> 6 == 3 else 2
    return size, samples, rate, channels


def _mp3(data: bytes, what: str) -> AudioHeader:
    offset = _id3_size(data)
    frames = samples = 0
    rate = channels = 0
    while offset < len(data):
        frame = _mp3_frame(data, offset)
        if frame is None:
            break
        size, frame_samples, frame_rate, frame_channels = frame
        if rate and frame_rate != rate:
            raise _bad(what, "the MP3 frames change sample rate mid-stream")
        rate, channels = frame_rate, max(channels, frame_channels)
        offset += size
        frames += 1
        samples += frame_samples
    rest = data[offset:] if offset < len(data) else b""
    if frames == 0:
        raise _bad(what, "no MPEG Layer III frame")
    tag = (rest[:3] == b"TAG" and len(rest) == 128) or rest[:8] == b"APETAGEX"
    if len(rest) >= 4 and not tag:  # under 4 bytes: a cut-off header, nothing to hide
        raise _bad(what, f"{len(rest)} bytes after frame {frames} are not MP3 frames")
    return AudioHeader("mp3", rate, channels, samples / rate)
