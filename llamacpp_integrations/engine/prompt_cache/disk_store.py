"""Prompts' KV state on disk, so a long prefix is read once even across restarts.

After a sequence has read a long prompt (``min_tokens`` or more), the engine saves the
sequence's state (``llama_state_seq_get_data``) here. A later request, in this process or
another, whose prompt shares a long prefix with a saved one and finds no better prefix in its
slots, has that state restored into its slot and cut back to the shared prefix, instead of
evaluating it.

A file is one entry: a fixed header (magic, version, lengths), a JSON block (the model's identity
and the tokens), the state bytes, and a SHA-256 of all of it. Files are named by the model identity
and the tokens' hash, written to a temporary name and renamed into place (atomic on one file
system), so a reader sees a whole file or none, and two engines saving the same prompt just
replace one copy with an identical one. The directory is kept under ``max_bytes`` by deleting the
least recently used files (a hit touches its file). A file that is truncated, corrupt, or of
another model is ignored with a warning and deleted; it never fails a request.

Finding the saved prompt that shares the longest prefix with a new one does not read or compare
every file: the tokens of the files seen so far sit in a ``PrefixIndex`` under ``SavedFile``
keys (the engine's own index, beside its slots and the prompts being read, so one walk of a
prompt's blocks finds every tier), brought up to date from the directory when it changed
(another engine may save into it too).

Pure: file handling only, no llama.cpp.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import tempfile
import time
from array import array
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..prefix_index import PrefixIndex

__all__ = ["CachedPrefix", "PromptDiskCache", "SavedFile"]

log = logging.getLogger("llamacpp_integrations.engine")

_MAGIC = b"LCIPCKV1"
_HEADER = struct.Struct("<8sQQ")  # magic, JSON length, state length
_DIGEST = 32
_SUFFIX = ".kvstate"


@dataclass(frozen=True)
class SavedFile:
    """A saved prompt's key in a prefix index: its file's name."""

    name: str


@dataclass(frozen=True)
class CachedPrefix:
    """A saved prompt whose first ``n_shared`` tokens a new prompt shares."""

    path: Path
    tokens: tuple[int, ...]
    n_shared: int


def _tokens_hash(tokens: Sequence[int]) -> str:
    # 64-bit: a prompt with images holds their keys, negative numbers up to 2**62.
    return hashlib.sha256(array("q", tokens).tobytes()).hexdigest()[:32]


class PromptDiskCache:
    """One directory of saved prompt states for one model (``model_id``). ``index``: the
    prefix index to keep the files' tokens in (by default one of its own)."""

    def __init__(self, directory: str | os.PathLike[str], model_id: str, *, max_bytes: int,
                 min_tokens: int, index: PrefixIndex[Hashable] | None = None) -> None:  # fmt: skip
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.model_id = model_id
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens
        self._prefix = hashlib.sha256(model_id.encode("utf-8")).hexdigest()[:16]
        # Tokens of this model's files read so far, by name: headers are read once per file.
        self._index: PrefixIndex[Hashable] = PrefixIndex() if index is None else index
        self._seen: tuple[int, float] | None = None  # the directory's mtime, and when looked

    def path_for(self, tokens: Sequence[int]) -> Path:
        return self.directory / f"{self._prefix}-{_tokens_hash(tokens)}{_SUFFIX}"

    def has(self, tokens: Sequence[int]) -> bool:
        return self.path_for(tokens).exists()

    # ---- saving -------------------------------------------------------------------------

    def save(self, tokens: Sequence[int], state: bytes) -> Path | None:
        """Write one entry atomically, then evict down to the size cap; None if it failed
        (a full disk is logged, never raised)."""
        path = self.path_for(tokens)
        meta = json.dumps({"model": self.model_id, "tokens": list(tokens)}).encode("utf-8")
        head = _HEADER.pack(_MAGIC, len(meta), len(state))
        digest = hashlib.sha256(head + meta + state).digest()
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=_SUFFIX)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(head)
                    out.write(meta)
                    out.write(state)
                    out.write(digest)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as error:
            log.warning("prompt cache: could not save %s: %s", path.name, error)
            return None
        self._index.add(SavedFile(path.name), tokens)
        self.evict()
        return path

    def evict(self) -> None:
        """Delete the least recently used entries until the directory fits ``max_bytes``, and
        temporary files a crashed writer left (older than an hour)."""
        with contextlib.suppress(OSError):
            for stale in self.directory.glob(".tmp-*"):
                with contextlib.suppress(OSError):
                    if time.time() - stale.stat().st_mtime > 3600:
                        os.unlink(stale)
        entries = []
        for entry in self._scan():
            with contextlib.suppress(OSError):
                stat = entry.stat()
                entries.append((stat.st_mtime, stat.st_size, entry))
        total = sum(size for _, size, _ in entries)
        for _, size, entry in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                os.unlink(entry)
            self._index.remove(SavedFile(entry.name))
            total -= size

    # ---- finding and loading ------------------------------------------------------------

    def find(
        self, prompt: Sequence[int], shared: Mapping[Hashable, int] | None = None
    ) -> CachedPrefix | None:
        """The saved prompt of this model sharing the longest prefix with ``prompt`` (at least
        ``min_tokens``), or None. ``shared``: the index's ``shared(prompt)``, when the caller
        looked it up already (after ``refresh``)."""
        if shared is None:
            self.refresh()
            shared = self._index.shared(prompt)
        found = max(
            ((n, key) for key, n in shared.items() if isinstance(key, SavedFile)),
            key=lambda pair: pair[0],
            default=None,
        )
        if found is None or found[0] < max(1, self.min_tokens):
            return None
        n_shared, key = found
        return CachedPrefix(self.directory / key.name, tuple(self._index.tokens(key)), n_shared)

    def refresh(self) -> None:
        """Index the files saved since the directory was last looked at, and forget the ones
        deleted: when its modification time changed, or a second has passed (a change within
        the file system's clock tick leaves the time as it was)."""
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except OSError:
            return
        now = time.monotonic()
        if self._seen is not None and self._seen[0] == mtime and now - self._seen[1] < 1.0:
            return
        self._seen = (mtime, now)
        names = {entry.name for entry in self._scan() if entry.name.startswith(self._prefix)}
        known = {key.name for key in self._index if isinstance(key, SavedFile)}
        for name in known - names:
            self._index.remove(SavedFile(name))
        for name in names - known:
            tokens = self._read_tokens(self.directory / name)
            if tokens is not None:
                self._index.add(SavedFile(name), tokens)

    def load(self, found: CachedPrefix) -> bytes | None:
        """The state bytes of an entry, checked whole; None (the file deleted) when it is
        damaged, of another model, or gone."""
        try:
            data = found.path.read_bytes()
        except OSError:
            self._index.remove(SavedFile(found.path.name))
            return None
        problem = self._check(data, found.tokens)
        if problem is not None:
            self._discard(found.path, problem)
            return None
        with contextlib.suppress(OSError):
            os.utime(found.path)  # most recently used
        _, n_meta, n_state = _HEADER.unpack_from(data)
        start = _HEADER.size + n_meta
        return data[start : start + n_state]

    def _check(self, data: bytes, tokens: tuple[int, ...] | None) -> str | None:
        if len(data) < _HEADER.size + _DIGEST:
            return "truncated"
        magic, n_meta, n_state = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            return "not a prompt-cache file"
        if len(data) != _HEADER.size + n_meta + n_state + _DIGEST:
            return "truncated"
        if hashlib.sha256(data[:-_DIGEST]).digest() != data[-_DIGEST:]:
            return "checksum mismatch"
        meta = self._meta(data[_HEADER.size : _HEADER.size + n_meta])
        if meta is None:
            return "unreadable header"
        if meta[0] != self.model_id:
            return "saved by another model"
        if tokens is not None and meta[1] != tokens:
            return "tokens differ from its header"
        return None

    def _read_tokens(self, path: Path) -> tuple[int, ...] | None:
        """The tokens in an entry's header (the body is checked when it is loaded)."""
        try:
            with open(path, "rb") as f:
                head = f.read(_HEADER.size)
                if len(head) < _HEADER.size:
                    raise ValueError("truncated")
                magic, n_meta, _ = _HEADER.unpack(head)
                if magic != _MAGIC or n_meta > 64 * 1024 * 1024:
                    raise ValueError("not a prompt-cache file")
                meta = self._meta(f.read(n_meta))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            self._discard(path, str(error))
            return None
        if meta is None:
            self._discard(path, "unreadable header")
            return None
        if meta[0] != self.model_id:
            self._discard(path, "saved by another model")
            return None
        return meta[1]

    @staticmethod
    def _meta(raw: bytes) -> tuple[str, tuple[int, ...]] | None:
        try:
            meta = json.loads(raw.decode("utf-8"))
            tokens = tuple(int(t) for t in meta["tokens"])
            return str(meta["model"]), tokens
        except (ValueError, KeyError, TypeError):
            return None

    def _discard(self, path: Path, why: str) -> None:
        log.warning("prompt cache: ignoring and deleting %s (%s)", path.name, why)
        self._index.remove(SavedFile(path.name))
        with contextlib.suppress(OSError):
            os.unlink(path)

    def _scan(self) -> list[Path]:
        try:
            return [
                Path(entry.path)
                for entry in os.scandir(self.directory)
                if entry.name.endswith(_SUFFIX) and not entry.name.startswith(".tmp-")
            ]
        except OSError:
            return []
