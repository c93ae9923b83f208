"""Which stop string ended an answer, for APIs that report it (Anthropic's ``stop_sequence``).

The engine ends an answer at the first stop string its output completes, and keeps that
string's text out of the answer; it does not say which one it was. The tokens that wrote it
were still generated, so their bytes (``TokenLogprob.bytes``, which a request gets by asking for
log-probabilities) hold it: the stop string that ended the answer is the one found in the last
tokens' text. No other can be there, since the engine would have stopped at it sooner.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..engine import TokenLogprob

__all__ = ["StopStringWatch"]


class StopStringWatch:
    """The tail of an answer's token bytes, long enough to hold any of ``stops``."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(dict.fromkeys(stop for stop in stops if stop))
        longest = max((len(stop.encode()) for stop in self.stops), default=0)
        # Room for the longest stop string and the token that completed it (whose text may go
        # on past it); a token is far shorter than 64 bytes in every vocabulary seen.
        self._room = 2 * longest + 64
        self._tail = b""

    def feed(self, tokens: Iterable[TokenLogprob]) -> None:
        """Take the next generated tokens."""
        for token in tokens:
            self._tail = (self._tail + bytes(token.bytes))[-self._room :]

    def matched(self) -> str | None:
        """The stop string that ended the answer (``None``: none did), as the engine picks it:
        the one that starts first, the first given on a tie."""
        text = self._tail.decode("utf-8", errors="replace")
        found: str | None = None
        at = -1
        for stop in self.stops:
            i = text.find(stop)
            if i != -1 and (at == -1 or i < at):
                found, at = stop, i
        return found
