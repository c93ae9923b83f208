"""Turn one request's generated token bytes into text that is safe to show.

Two things make a token's text unsafe to emit as soon as it arrives:

* a UTF-8 character can be split over several tokens, so a token's bytes may end in the middle
  of a character (an incremental decoder keeps those bytes until the character is complete);
* a stop string can be split over several tokens, so text that *might* be the start of a stop
  string is held back until the next tokens show whether it is one.

The processor only ever scans the held-back tail plus the new piece, never the whole answer, so
the per-token cost does not grow with the length of the answer.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

__all__ = ["OutputProcessor"]


class OutputProcessor:
    """Incremental UTF-8 decoding and stop-string handling for one request.

    Attributes:
        stopped: True once a stop string has been completed; nothing more is emitted after it.
        stop_string: The stop string that ended the text (``None`` until ``stopped``).
    """

    def __init__(self, stop: Sequence[str] = ()) -> None:
        """``stop`` holds non-empty strings (``GenerationRequest.validate_common`` checks them)."""
        self._stops: tuple[str, ...] = tuple(dict.fromkeys(stop))  # dedupe, keep order
        # Every proper prefix of every stop string: the held-back tail is always one of these,
        # and looking suffixes up in a set is cheaper than calling startswith per stop string.
        self._prefixes: frozenset[str] = frozenset(
            s[:n] for s in self._stops for n in range(1, len(s))
        )
        self._max_hold = max((len(s) - 1 for s in self._stops), default=0)
        # errors="replace": a model can produce invalid UTF-8; show U+FFFD rather than fail.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # decoded text held back because it may start a stop string
        self._parts: list[str] = []
        self._text_cache: str | None = ""
        self.stopped = False
        self.stop_string: str | None = None

    @property
    def text(self) -> str:
        """All text emitted so far (by ``feed`` and ``flush``)."""
        if self._text_cache is None:
            # Join lazily: ``text`` is read rarely, ``feed`` is called once per token.
            self._text_cache = "".join(self._parts)
            self._parts = [self._text_cache]
        return self._text_cache

    def feed(self, piece: bytes) -> str:
        """Take the bytes of one generated token; return the text that can now be emitted."""
        if self.stopped:
            return ""
        return self._process(self._decoder.decode(piece), final=False)

    def flush(self) -> str:
        """Return what is still held back at the end of generation.

        An incomplete UTF-8 tail becomes U+FFFD. A held-back partial stop string was real text
        after all (generation ended before it was completed), so it is emitted.
        """
        if self.stopped:
            return ""
        return self._process(self._decoder.decode(b"", final=True), final=True)

    def _process(self, new: str, *, final: bool) -> str:
        if not self._stops:
            return self._emit(new)
        buf = self._pending + new if self._pending else new
        if not buf:
            return ""
        # No stop string can start before the held-back tail: the tail is the *longest* suffix
        # that is a prefix of a stop string, so anything earlier was already ruled out.
        cut, found = -1, None
        for s in self._stops:
            i = buf.find(s)
            if i != -1 and (cut == -1 or i < cut):
                cut, found = i, s
        hold = 0 if final else self._held_back_length(buf)
        keep = len(buf) - hold  # start of the tail that may still grow into a stop string
        if cut != -1 and cut <= keep:
            self.stopped, self.stop_string = True, found
            self._pending = ""
            return self._emit(buf[:cut])
        # Either no stop string yet, or one is complete but a longer one that starts earlier may
        # still complete (stops "<|x|>" and "|", text "<|"): wait for it, so that the cut is
        # always at the earliest start, however the text happens to be split into tokens.
        self._pending = buf[keep:]
        return self._emit(buf[:keep])

    def _held_back_length(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that is a proper prefix of a stop string."""
        for n in range(min(len(buf), self._max_hold), 0, -1):
            if buf[-n:] in self._prefixes:
                return n
        return 0

    def _emit(self, chunk: str) -> str:
        if chunk:
            self._parts.append(chunk)
            self._text_cache = None
        return chunk
