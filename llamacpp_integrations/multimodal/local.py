"""Reading an image file, only from under the policy's allowed directories.

The path is resolved (``..`` removed, every symlink followed) before the containment check, so
neither traversal nor a symlink pointing outside gets through; the file is then opened without
following a final symlink and, where ``/proc`` shows it, the opened file's real path is checked
again, which closes the window between the check and the open. Only regular files are read (a
FIFO or device cannot block or stream forever), and no more than ``max_bytes`` of them.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import ImageLoadError
from .policy import ImagePolicy

__all__ = ["read_local_file"]

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_BINARY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def _refused(shown: str, why: str) -> ImageLoadError:
    return ImageLoadError(f"path {shown!r} {why}", reason="path-not-allowed")


def _allowed_roots(policy: ImagePolicy) -> list[Path]:
    roots = []
    for directory in policy.allowed_dirs:
        try:
            roots.append(directory.resolve())
        except (OSError, RuntimeError, ValueError):
            continue
    return roots


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def _opened_path(fd: int) -> Path | None:
    """The real path of an open file descriptor, where the OS tells (Linux ``/proc``)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


def read_local_file(path: str, policy: ImagePolicy) -> bytes:
    """The bytes of the file at ``path`` (relative paths start at the working directory)."""
    shown = path if len(path) <= 200 else path[:200] + "..."
    if not policy.allowed_dirs:
        raise _refused(
            shown, "refused: local files are not read (ImagePolicy.allowed_dirs is empty)"
        )
    if "\x00" in path:
        raise _refused(shown, "contains a NUL character")
    roots = _allowed_roots(policy)
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, among others
        raise _refused(shown, f"cannot be resolved ({exc})") from exc
    if not _inside(resolved, roots):
        raise _refused(shown, "is outside the allowed directories")
    try:
        fd = os.open(resolved, _OPEN_FLAGS)
    except FileNotFoundError as exc:
        raise ImageLoadError(f"no file at {shown!r}", reason="not-found") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component became a symlink after the check
            raise _refused(shown, "turned into a symlink") from exc
        raise ImageLoadError(f"cannot open {shown!r}: {exc.strerror}", reason="not-found") from exc
    try:
        real = _opened_path(fd)
        if real is not None and not _inside(real, roots):
            raise _refused(shown, "is outside the allowed directories")
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ImageLoadError(f"{shown!r} is not a regular file", reason="not-found")
        if info.st_size > policy.max_bytes:
            raise ImageLoadError(
                f"file {shown!r} is {info.st_size} bytes, over the {policy.max_bytes}-byte limit",
                reason="too-large",
            )
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(1 << 20, policy.max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > policy.max_bytes:  # the file grew after fstat
                raise ImageLoadError(
                    f"file {shown!r} is over the {policy.max_bytes}-byte limit",
                    reason="too-large",
                )
    except OSError as exc:
        raise ImageLoadError(f"cannot read {shown!r}: {exc.strerror}", reason="not-found") from exc
    finally:
        os.close(fd)
    return b"".join(chunks)
