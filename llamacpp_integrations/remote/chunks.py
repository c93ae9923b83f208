"""llama-server's streamed ``/completion`` events as our ``StreamChunk`` s (pure: no I/O).

One ``ChunkReader`` per request. The server already did the token-level work (stop strings held
back and cut, UTF-8 completed), so each event's ``content`` is text that is safe to show; what is
left here is ours: a reasoning model's thinking split from the answer (the engine's own
``ReasoningSplitter``), log-probabilities in our types, finish reasons, usage and timings.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ..engine.results import FinishReason, StreamChunk, Timings, TokenLogprob, TopLogprob, Usage
from ..engine.types import GenerationRequest
from ..prompts.reasoning import ReasoningSplitter

__all__ = ["FINISH_REASONS", "ChunkReader", "token_logprob"]

# The server's ``stop_type`` on its last event: end of generation, a stop string, n_predict.
FINISH_REASONS: Mapping[str, FinishReason] = {
    "eos": "stop",
    "word": "stop",
    "limit": "length",
    "none": "stop",
}


def _stop_string(event: Mapping[str, Any]) -> str | None:
    """The stop string that ended the answer, as the server's last event names it."""
    word = event.get("stopping_word")
    return word if event.get("stop_type") == "word" and isinstance(word, str) and word else None


def _text_of(raw: object) -> tuple[str, tuple[int, ...]]:
    data = bytes(raw) if isinstance(raw, list) else b""
    return data.decode("utf-8", errors="replace"), tuple(data)


def token_logprob(entry: Mapping[str, Any], top_n: int) -> TokenLogprob:
    """One ``completion_probabilities`` entry (``post_sampling_probs`` off)."""
    token_id = int(entry["id"])
    raw_bytes = entry.get("bytes")
    top: list[TopLogprob] = []
    for index, alt in enumerate(entry.get("top_logprobs", ())):
        if int(alt["id"]) == token_id:
            # The entry's own bytes are the text the server showed for it (none for a token
            # of a stop string); the alternative's are the token's piece, as the local engine
            # reports it.
            raw_bytes = alt.get("bytes")
        if index < top_n:
            alt_text, alt_raw = _text_of(alt.get("bytes"))
            top.append(TopLogprob(alt_text, int(alt["id"]), float(alt["logprob"]), alt_raw))
    text, raw = _text_of(raw_bytes)
    return TokenLogprob(text, token_id, float(entry["logprob"]), raw, tuple(top))


class ChunkReader:
    """Turns one request's events into chunks and keeps what its last chunk reports."""

    def __init__(self, request: GenerationRequest, *, submitted_at: float | None = None) -> None:
        self.request = request
        self.submitted_at = time.monotonic() if submitted_at is None else submitted_at
        self.first_token_at: float | None = None
        self.n_tokens = 0
        self.delivered = 0  # chunks handed to the caller: after one, nothing may be retried
        self._parts: list[str] = []
        spec = request.reasoning
        self._splitter = None if spec is None else spec.splitter()
        self._reasoning_tokens = 0
        self._undecided = 0
        self._held_tokens: list[int] = []
        self._held_logprobs: list[TokenLogprob] = []

    @property
    def text(self) -> str:
        """The answer text read so far (what an error's ``partial_text`` holds)."""
        return "".join(self._parts)

    def read(self, event: Mapping[str, Any]) -> StreamChunk | None:
        """The chunk for one event (``None`` when it carries nothing to report yet)."""
        now = time.monotonic()
        tokens = [int(t) for t in event.get("tokens") or ()]
        content = event.get("content") or ""
        final = bool(event.get("stop"))
        if tokens and self.first_token_at is None:
            self.first_token_at = now
        logprobs = list(self._logprobs(event))
        # A token with no text is held until the next event: it is the end-of-generation
        # token when the server's last event says so ("eos"), which the local engine neither
        # shows nor counts (or an incomplete UTF-8 character, whose text comes next).
        if not final and tokens and not content:
            self._held_tokens += tokens
            self._held_logprobs += logprobs
            return None
        if final and event.get("stop_type") == "eos" and self._held_tokens:
            self._held_tokens.pop()
            if len(self._held_logprobs) > len(self._held_tokens):
                self._held_logprobs.pop()
        tokens, logprobs = self._held_tokens + tokens, self._held_logprobs + logprobs
        self._held_tokens, self._held_logprobs = [], []
        self.n_tokens += len(tokens)
        reasoning, text = self._split(content, len(tokens), final=final)
        if text:
            self._parts.append(text)
        if not final:
            if not (text or reasoning or tokens):
                return None
            return StreamChunk(
                request_id=self.request.request_id,
                text=text,
                token_ids=tuple(tokens),
                logprobs=tuple(logprobs),
                reasoning=reasoning,
            )
        return StreamChunk(
            request_id=self.request.request_id,
            text=text,
            token_ids=tuple(tokens),
            finish_reason=FINISH_REASONS.get(str(event.get("stop_type")), "stop"),
            usage=self._usage(event),
            timings=self._timings(event, now),
            logprobs=tuple(logprobs),
            reasoning=reasoning,
            stop_string=_stop_string(event),
        )

    def _logprobs(self, event: Mapping[str, Any]) -> tuple[TokenLogprob, ...]:
        wanted = self.request.logprobs
        if wanted is None:
            return ()
        return tuple(token_logprob(e, wanted) for e in event.get("completion_probabilities", ()))

    def _split(self, content: str, n_tokens: int, *, final: bool) -> tuple[str, str]:
        """(reasoning, answer) of a piece of output; tokens counted as the engine counts them:
        a token is reasoning when the reasoning was going on before it, or when it shows that
        the output opened reasoning (then so are the undecided ones before it)."""
        splitter: ReasoningSplitter | None = self._splitter
        if splitter is None:
            return "", content
        before = splitter.state
        reasoning, answer = splitter.finish(content) if final else splitter.feed(content)
        after = splitter.state
        if final:
            if after == "reasoning":
                self._reasoning_tokens += self._undecided + (n_tokens if before != "answer" else 0)
            self._undecided = 0
        elif before == "reasoning":
            self._reasoning_tokens += n_tokens
        elif before == "undecided":
            if after == "undecided":
                self._undecided += n_tokens
            else:
                if after == "reasoning":
                    self._reasoning_tokens += self._undecided + n_tokens
                self._undecided = 0
        return reasoning, answer

    def _usage(self, event: Mapping[str, Any]) -> Usage:
        timings = event.get("timings") or {}
        cached = int(timings.get("cache_n", 0))
        evaluated = int(timings.get("prompt_n", event.get("tokens_evaluated", 0)))
        return Usage(
            prompt_tokens=cached + evaluated,
            completion_tokens=self.n_tokens,
            cached_prompt_tokens=cached,
            reasoning_tokens=self._reasoning_tokens,
        )

    def _timings(self, event: Mapping[str, Any], now: float) -> Timings:
        timings = event.get("timings") or {}
        first = self.first_token_at
        prompt_s = float(timings.get("prompt_ms", 0.0)) / 1000
        # The server does not say how long the request waited for a slot: what the client
        # saw before the first token, less the prompt's evaluation, is the best estimate.
        before_first = (first or now) - self.submitted_at
        return Timings(
            queued_s=max(before_first - prompt_s, 0.0),
            time_to_first_token_s=None if first is None else first - self.submitted_at,
            total_s=now - self.submitted_at,
            prompt_eval_s=prompt_s,
            generation_s=float(timings.get("predicted_ms", 0.0)) / 1000,
        )
