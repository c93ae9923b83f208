"""Read and validate the header of a GGUF file without loading it.

llama.cpp aborts or misbehaves on some malformed files instead of failing cleanly, so every file
is checked here first: the header, every metadata entry, every tensor description, and that the
file is long enough to hold every tensor's data.  Only the header is read (a few MB at most for a
large vocabulary); the tensor data is never touched.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import ModelLoadError

__all__ = ["GGML_TYPE_SIZES", "GGUFInfo", "read_gguf_info"]

_MAGIC = b"GGUF"
_SUPPORTED_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32
_MAX_DIMS = 4  # GGML_MAX_DIMS: llama.cpp rejects tensors with more dimensions
_MAX_KEPT_ARRAY = 64  # longer arrays (vocabularies, merges, scores) are summarised, not kept
_CHUNK = 1 << 20

# Smallest possible encodings, used to reject counts no file of this size could hold before
# looping over them: a KV is a key length (8) + value type (4) + at least one value byte; a tensor
# info is a name length (8) + n_dims (4) + ggml type (4) + offset (8).
_MIN_KV_BYTES = 13
_MIN_TENSOR_INFO_BYTES = 24
_HEADER_BYTES = 24  # magic (4) + version (4) + n_tensors (8) + n_kv (8)

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# GGUF metadata value types -> struct format of the fixed-size ones.
_T_STRING = 8
_T_ARRAY = 9
_SCALAR_FORMATS: dict[int, str] = {
    0: "B",  # uint8
    1: "b",  # int8
    2: "H",  # uint16
    3: "h",  # int16
    4: "I",  # uint32
    5: "i",  # int32
    6: "f",  # float32
    7: "?",  # bool
    10: "Q",  # uint64
    11: "q",  # int64
    12: "d",  # float64
}
_SCALAR_STRUCTS = {t: struct.Struct("<" + f) for t, f in _SCALAR_FORMATS.items()}
_TYPE_NAMES = {
    0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32", 6: "f32",
    7: "bool", 8: "str", 9: "array", 10: "u64", 11: "i64", 12: "f64",
}  # fmt: skip

# ggml tensor type id -> (name, elements per block, bytes per block).  The byte counts are the
# sizes of ggml's block structs (ggml-common.h); K-quants and most IQ types use 256-element
# super-blocks, the classic quants 32-element blocks.
GGML_TYPE_SIZES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}


@dataclass(frozen=True)
class GGUFInfo:
    """What the GGUF header says about a model file (nothing is loaded)."""

    path: Path
    version: int
    n_tensors: int
    name: str | None
    architecture: str
    context_length: int | None
    embedding_length: int | None
    block_count: int | None
    chat_template: str | None
    pooling_type: int | None
    file_type: int | None
    size_bytes: int
    metadata: dict[str, object] = field(repr=False)


class _Reader:
    """Buffered little-endian reader that refuses to read past the end of the file."""

    def __init__(self, fh: BinaryIO, size: int, path: str) -> None:
        self._fh = fh
        self._size = size
        self._path = path
        self._buf = b""
        self._pos = 0  # position inside _buf
        self._base = 0  # file offset of _buf[0]

    @property
    def offset(self) -> int:
        return self._base + self._pos

    def fail(self, reason: str) -> ModelLoadError:
        return ModelLoadError(self._path, reason)

    def remaining(self) -> int:
        return self._size - self.offset

    def _ensure(self, n: int, what: str) -> None:
        if n > self.remaining():
            raise self.fail(
                f"{what} at offset {self.offset} needs {n} bytes but the file ends after "
                f"{self.remaining()} more (runs past the end of the file)"
            )
        if len(self._buf) - self._pos >= n:
            return
        rest = self._buf[self._pos :]
        self._base = self.offset
        self._buf = rest + self._fh.read(max(n - len(rest), _CHUNK))
        self._pos = 0
        if len(self._buf) < n:  # the file shrank while we were reading it
            raise self.fail(f"{what}: unexpected end of file at offset {self.offset}")

    def read(self, n: int, what: str) -> bytes:
        self._ensure(n, what)
        data = self._buf[self._pos : self._pos + n]
        self._pos += n
        return data

    def unpack(self, st: struct.Struct, what: str) -> tuple[object, ...]:
        self._ensure(st.size, what)
        values = st.unpack_from(self._buf, self._pos)
        self._pos += st.size
        return values

    def u32(self, what: str) -> int:
        self._ensure(4, what)
        (value,) = _U32.unpack_from(self._buf, self._pos)
        self._pos += 4
        return int(value)

    def u64(self, what: str) -> int:
        self._ensure(8, what)
        (value,) = _U64.unpack_from(self._buf, self._pos)
        self._pos += 8
        return int(value)

    def u64s(self, count: int, what: str) -> list[int]:
        self._ensure(8 * count, what)
        values = struct.unpack_from(f"<{count}Q", self._buf, self._pos)
        self._pos += 8 * count
        return list(values)

    def skip(self, n: int, what: str) -> None:
        if n > self.remaining():
            self._ensure(n, what)  # raises with the standard message
        if len(self._buf) - self._pos >= n:
            self._pos += n
            return
        # Jump over large runs (e.g. a float32 score per token) without reading them.
        target = self.offset + n
        self._fh.seek(target)
        self._buf, self._pos, self._base = b"", 0, target

    def string(self, what: str) -> str:
        length = self.u64(what)
        return self.read(length, what).decode("utf-8", errors="replace")

    def skip_strings(self, count: int, what: str) -> None:
        # Hot loop for tokenizer vocabularies (~50k entries): work on the buffer directly and
        # only fall back to the checked methods when an entry crosses the buffer's end.
        unpack_from = _U64.unpack_from
        for _ in range(count):
            buf, pos = self._buf, self._pos
            if pos + 8 <= len(buf):
                end = pos + 8 + unpack_from(buf, pos)[0]
                if end <= len(buf):
                    self._pos = end
                    continue
            self.skip(self.u64(what), what)


def _check_file(path: Path) -> int:
    """Return the file size, or raise if it is missing, not a regular file, or unreadable."""
    name = str(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ModelLoadError(name, "file does not exist") from None
    except OSError as exc:
        raise ModelLoadError(name, f"cannot read file: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ModelLoadError(name, "is a directory, not a GGUF file")
    if not stat.S_ISREG(st.st_mode):
        raise ModelLoadError(name, "is not a regular file")
    if st.st_size < _HEADER_BYTES:
        raise ModelLoadError(
            name, f"file is {st.st_size} bytes, too small to be a GGUF file (truncated header)"
        )
    return st.st_size


def _read_value(r: _Reader, vtype: int, key: str) -> object:
    if vtype == _T_STRING:
        return r.string(f"string value of {key!r}")
    if vtype == _T_ARRAY:
        return _read_array(r, key)
    st = _SCALAR_STRUCTS.get(vtype)
    if st is None:
        raise r.fail(f"metadata key {key!r} has unknown value type {vtype}")
    return r.unpack(st, f"value of {key!r}")[0]


def _read_array(r: _Reader, key: str) -> object:
    what = f"array {key!r}"
    etype = r.u32(what)
    count = r.u64(what)
    if etype == _T_ARRAY:
        # llama.cpp's loader does not accept nested arrays either.
        raise r.fail(f"metadata key {key!r} is an array of arrays, which is not supported")
    if etype == _T_STRING:
        elem_min = 8
    elif etype in _SCALAR_STRUCTS:
        elem_min = _SCALAR_STRUCTS[etype].size
    else:
        raise r.fail(f"metadata array {key!r} has unknown element type {etype}")
    if count * elem_min > r.remaining():
        raise r.fail(
            f"{what} claims {count} elements, which runs past the end of the file "
            f"({r.remaining()} bytes left)"
        )
    if count > _MAX_KEPT_ARRAY:
        if etype == _T_STRING:
            r.skip_strings(count, what)
        else:
            r.skip(count * elem_min, what)
        return f"<array of {count} {_TYPE_NAMES[etype]}>"
    if etype == _T_STRING:
        return [r.string(what) for _ in range(count)]
    fmt = struct.Struct(f"<{count}{_SCALAR_FORMATS[etype]}")
    return list(r.unpack(fmt, what))


def _tensor_nbytes(r: _Reader, name: str, dims: list[int], ggml_type: int) -> int | None:
    """Bytes of tensor data, or None when the type is one this table does not know."""
    known = GGML_TYPE_SIZES.get(ggml_type)
    if known is None:
        return None
    type_name, block, block_bytes = known
    if dims and dims[0] % block:
        raise r.fail(
            f"tensor {name!r}: first dimension {dims[0]} is not a multiple of the "
            f"{type_name} block size {block}"
        )
    n_elements = 1
    for d in dims:
        n_elements *= d
    return n_elements // block * block_bytes


def _as_int(value: object) -> int | None:
    # bool is an int subclass, but a bool is never a meaningful length or count.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _parse(r: _Reader, path: Path, size: int) -> GGUFInfo:
    magic = r.read(4, "magic")
    if magic != _MAGIC:
        raise r.fail(f"not a GGUF file (bad magic {magic!r}, expected {_MAGIC!r})")
    version = r.u32("version")
    if version not in _SUPPORTED_VERSIONS:
        raise r.fail(
            f"unsupported GGUF version {version} (supported: "
            f"{', '.join(map(str, _SUPPORTED_VERSIONS))})"
        )
    n_tensors = r.u64("tensor count")
    n_kv = r.u64("metadata count")
    if n_tensors * _MIN_TENSOR_INFO_BYTES + n_kv * _MIN_KV_BYTES > r.remaining():
        raise r.fail(
            f"header claims {n_tensors} tensors and {n_kv} metadata entries, more than a file "
            f"of {size} bytes can hold"
        )

    metadata: dict[str, object] = {}
    for i in range(n_kv):
        key = r.string(f"key of metadata entry {i}")
        if key in metadata:
            raise r.fail(f"duplicate metadata key {key!r}")
        vtype = r.u32(f"value type of {key!r}")
        metadata[key] = _read_value(r, vtype, key)

    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise r.fail("missing general.architecture (not a llama.cpp model file?)")
    raw_alignment = metadata.get("general.alignment", _DEFAULT_ALIGNMENT)
    alignment = _as_int(raw_alignment)
    if alignment is None or alignment <= 0 or alignment & (alignment - 1):
        raise r.fail(f"general.alignment must be a power of two, got {raw_alignment!r}")

    data_needed = 0  # bytes of the data section the tensors use
    seen: set[str] = set()
    for i in range(n_tensors):
        name = r.string(f"name of tensor {i}")
        if name in seen:
            raise r.fail(f"duplicate tensor name {name!r}")
        seen.add(name)
        n_dims = r.u32(f"tensor {name!r}")
        if n_dims > _MAX_DIMS:
            raise r.fail(f"tensor {name!r} has {n_dims} dimensions (at most {_MAX_DIMS})")
        dims = r.u64s(n_dims, f"dimensions of tensor {name!r}")
        ggml_type = r.u32(f"type of tensor {name!r}")
        offset = r.u64(f"offset of tensor {name!r}")
        if offset % alignment:
            raise r.fail(f"tensor {name!r} offset {offset} is not aligned to {alignment}")
        nbytes = _tensor_nbytes(r, name, dims, ggml_type)
        if nbytes is not None:
            data_needed = max(data_needed, offset + nbytes)

    data_start = -(-r.offset // alignment) * alignment
    if n_tensors and size < data_start + data_needed:
        raise r.fail(
            f"file is truncated: tensor data ends at byte {data_start + data_needed} but the "
            f"file has only {size} bytes"
        )

    def meta_int(key: str) -> int | None:
        return _as_int(metadata.get(key))

    def meta_str(key: str) -> str | None:
        value = metadata.get(key)
        return value if isinstance(value, str) else None

    return GGUFInfo(
        path=path,
        version=version,
        n_tensors=n_tensors,
        name=meta_str("general.name"),
        architecture=arch,
        context_length=meta_int(f"{arch}.context_length"),
        embedding_length=meta_int(f"{arch}.embedding_length"),
        block_count=meta_int(f"{arch}.block_count"),
        chat_template=meta_str("tokenizer.chat_template"),
        pooling_type=meta_int(f"{arch}.pooling_type"),
        file_type=meta_int("general.file_type"),
        size_bytes=size,
        metadata=metadata,
    )


def read_gguf_info(path: str | os.PathLike[str]) -> GGUFInfo:
    """Read and validate a GGUF file's header; raise ``ModelLoadError`` if it is unusable.

    Checks the magic, version, counts, every metadata entry and tensor description, and that
    the file holds all tensor data.  Arrays longer than 64 items are kept in ``metadata`` only
    as a summary string such as ``"<array of 49152 str>"``.
    """
    p = Path(path).expanduser()
    size = _check_file(p)
    try:
        with p.open("rb") as fh:
            return _parse(_Reader(fh, size, str(p)), p, size)
    except OSError as exc:
        raise ModelLoadError(str(p), f"cannot read file: {exc.strerror or exc}") from None
