"""A flag, settable from any thread, that ends a context's ``llama_decode`` under way early.

llama.cpp's CPU backend calls a context's abort callback between the nodes of a decode's graph
(on one of its threads), and stops when it returns true: ``llama_decode`` then returns 2 and
removes the positions of the batch it was decoding from the cache, so the same batch can be
decoded again as if never tried (a decode of ``n_batch`` tokens or fewer is one micro-batch,
as every context here makes them). The callback is called hundreds of times a token; one
written in Python would take the GIL each time. So the callback is C's ``strlen`` on a byte
buffer this object owns: empty, it returns 0 (go on); holding one byte, 1 (stop). A ``size_t``
returned where a ``bool`` is read is the low byte of the same register on every ABI llama.cpp
runs on, so 0 and 1 read as false and true.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp

__all__ = ["ABORTED", "DecodeInterrupt", "DecodeInterrupted"]

ABORTED = 2
"""What ``llama_decode`` returns when its abort callback stopped it."""

_STOP = b"\x01"


class DecodeInterrupted(Exception):
    """A decode stopped by its context's ``interrupt``; the cache is as before it. The worker
    that asked for it catches it: it never reaches a caller."""


def _strlen() -> Any:
    libc = ctypes.CDLL(None)  # the symbols the process has loaded, the C library's among them
    return ctypes.cast(libc.strlen, llama_cpp.ggml_abort_callback)


class DecodeInterrupt:
    """Installed on one llama.cpp context by ``attach``; ``request`` (any thread) stops the
    decode under way there, or the next one if none is; ``clear`` (the decoding thread) lets
    decodes run again."""

    def __init__(self) -> None:
        self._flag = ctypes.create_string_buffer(2)  # lives as long as this object
        self._callback = _strlen()

    def attach(self, ctx: Any) -> None:
        """Make ``ctx``'s decodes stop while the flag is up; this object must outlive it."""
        data = ctypes.cast(self._flag, ctypes.c_void_p)
        llama_cpp.llama_set_abort_callback(ctx, self._callback, data)

    def request(self) -> None:
        """Stop the decode under way (between two nodes of its graph); safe from any thread."""
        self._flag.value = _STOP

    def clear(self) -> None:
        self._flag.value = b""
