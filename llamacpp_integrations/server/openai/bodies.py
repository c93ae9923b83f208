"""Engine answers to OpenAI response bodies: whole answers, stream chunks, embeddings.

The shapes are OpenAI's (``chat.completion``, ``chat.completion.chunk``, ``text_completion``,
``list`` of ``embedding``); a reasoning model's thinking goes in ``reasoning_content`` beside
``content``, as llama-server and DeepSeek's API put it. ``ChatBodies`` and ``CompletionBodies``
are every body of one answer of each endpoint, whole or streamed, so the route that sends them
is one for both; each knows its choice's ``index`` (a request for ``n`` answers has ``n``).

A tool call that ``max_tokens`` cut short comes back in ``tool_calls`` with the arguments
written so far and ``finish_reason`` ``"length"``, as OpenAI's do, when its name is known (it
was written, or the tool choice named it); one cut before its name is left out, since OpenAI's
shape has no call without a name.
"""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from ...client import CallResult, openai_logprobs
from ...engine import TokenLogprob, Usage
from ...tools import InvalidToolCall, ToolCallDelta, ToolStreamChunk, openai_tool_call

__all__ = [
    "AnswerBodies",
    "ChatBodies",
    "CompletionBodies",
    "ResponseIds",
    "chat_chunk",
    "chat_response",
    "completion_chunk",
    "completion_response",
    "embedding_response",
    "finish_reason",
    "usage_body",
]

_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls"}


class ResponseIds:
    """The id, creation time and model name every body of one response repeats."""

    def __init__(self, prefix: str, request_id: str, model: str) -> None:
        self.id = f"{prefix}-{request_id.removeprefix('req-')}"
        self.created = int(time.time())
        self.model = model

    def head(self, object: str) -> dict[str, Any]:
        return {"id": self.id, "object": object, "created": self.created, "model": self.model}


def finish_reason(reason: str | None) -> str | None:
    """OpenAI's finish reason for ours (a cancelled or failed request never gets here)."""
    return None if reason is None else _FINISH.get(reason, "stop")


def usage_body(usage: Usage) -> dict[str, Any]:
    """``usage`` with OpenAI's details (cached prompt tokens, reasoning tokens)."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def _legacy_logprobs(entries: Sequence[TokenLogprob], offset: int) -> dict[str, Any]:
    """Legacy completions' ``logprobs``: parallel lists, top tokens as ``{token: logprob}``."""
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(e.token)
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{t.token: t.logprob for t in e.top} for e in entries],
        "text_offset": offsets,
    }


def _named(cut: tuple[InvalidToolCall, ...]) -> list[InvalidToolCall]:
    """The cut calls whose name is known (OpenAI's shape needs one)."""
    return [call for call in cut if call.name]


def _cut_call(call: InvalidToolCall) -> dict[str, Any]:
    assert call.name is not None
    return openai_tool_call(call.id, call.name, call.arguments)


def chat_response(
    ids: ResponseIds, result: CallResult, logprobs: bool, *, index: int = 0
) -> dict[str, Any]:
    """A whole chat answer (choice ``index``)."""
    calls = [call.to_openai() for call in result.tool_calls]
    calls += [_cut_call(call) for call in _named(result.invalid_calls)]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": result.content if result.content or not calls else None,
    }
    if calls:
        message["tool_calls"] = calls
    if result.reasoning:
        message["reasoning_content"] = result.reasoning
    completion = result.completion
    choice: dict[str, Any] = {
        "index": index,
        "message": message,
        "logprobs": ({"content": openai_logprobs(completion.logprobs or ())} if logprobs else None),
        "finish_reason": finish_reason(result.finish_reason),
    }
    return ids.head("chat.completion") | {
        "choices": [choice],
        "usage": usage_body(completion.usage),
        "system_fingerprint": None,
    }


def _delta_call(delta: ToolCallDelta) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": delta.arguments}
    out: dict[str, Any] = {"index": delta.index, "function": function}
    if delta.id is not None:
        out |= {"id": delta.id, "type": "function"}
    if delta.name is not None:
        function["name"] = delta.name
    return out


def chat_chunk(
    ids: ResponseIds,
    piece: ToolStreamChunk | None,
    logprobs: bool,
    *,
    first: bool = False,
    index: int = 0,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of choice ``index``: the role first, then text, reasoning
    and call deltas; the piece with a finish reason carries it (usage goes in a chunk of its
    own)."""
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
    choice: dict[str, Any] = {
        "index": index,
        "delta": delta,
        "logprobs": None,
        "finish_reason": None,
    }
    if piece is not None:
        if piece.text:
            delta["content"] = piece.text
        if piece.reasoning:
            delta["reasoning_content"] = piece.reasoning
        if piece.tool_call_deltas:
            delta["tool_calls"] = [_delta_call(d) for d in piece.tool_call_deltas]
        if logprobs and piece.logprobs:
            choice["logprobs"] = {"content": openai_logprobs(piece.logprobs)}
        if piece.finish_reason is not None:
            reason = "length" if piece.invalid_calls else piece.finish_reason
            reason = "tool_calls" if piece.tool_calls and reason == "stop" else reason
            choice["finish_reason"] = finish_reason(reason)
    return ids.head("chat.completion.chunk") | {"choices": [choice], "system_fingerprint": None}


def usage_chunk(ids: ResponseIds, usage: Usage, object: str) -> dict[str, Any]:
    """The last chunk of a stream asked for ``include_usage``: no choices, the usage."""
    return ids.head(object) | {"choices": [], "usage": usage_body(usage)}


def completion_response(
    ids: ResponseIds, result: CallResult, logprobs: bool, *, index: int = 0
) -> dict[str, Any]:
    """A whole legacy completion (choice ``index``)."""
    completion = result.completion
    choice = {
        "index": index,
        "text": result.content,
        "logprobs": _legacy_logprobs(completion.logprobs or (), 0) if logprobs else None,
        "finish_reason": finish_reason(completion.finish_reason),
    }
    return ids.head("text_completion") | {
        "choices": [choice],
        "usage": usage_body(completion.usage),
    }


def completion_chunk(
    ids: ResponseIds, piece: ToolStreamChunk, logprobs: bool, offset: int, *, index: int = 0
) -> dict[str, Any]:
    """One streamed legacy completion chunk of choice ``index`` (``offset``: characters sent
    before it)."""
    choice = {
        "index": index,
        "text": piece.text,
        "logprobs": _legacy_logprobs(piece.logprobs, offset) if logprobs else None,
        "finish_reason": finish_reason(piece.finish_reason),
    }
    return ids.head("text_completion") | {"choices": [choice]}


def embedding_response(
    vectors: Sequence[Sequence[float]], model: str, encoding: str, prompt_tokens: int
) -> dict[str, Any]:
    """Embeddings, as floats or as base64 of little-endian float32 (what the ``openai``
    client asks for by default)."""
    data = []
    for index, vector in enumerate(vectors):
        value: list[float] | str = list(vector)
        if encoding == "base64":
            packed = struct.pack(f"<{len(vector)}f", *vector)
            value = base64.b64encode(packed).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": value})
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


class AnswerBodies:
    """Every body of one generation's answer: whole, or streamed (a first chunk, one chunk a
    piece, the usage chunk a stream asked for with ``include_usage``)."""

    chunk_object: ClassVar[str]

    def __init__(self, ids: ResponseIds, logprobs: bool, *, index: int = 0) -> None:
        self.ids = ids
        self.logprobs = logprobs
        self.index = index

    def again(self, index: int) -> AnswerBodies:
        """The bodies of another choice of the same response."""
        return type(self)(self.ids, self.logprobs, index=index)

    def whole(self, result: CallResult) -> dict[str, Any]:
        """The body of a whole answer."""
        raise NotImplementedError

    def opening(self) -> dict[str, Any] | None:
        """The chunk a stream starts with, before any piece (``None``: none)."""
        return None

    def chunk(self, piece: ToolStreamChunk) -> dict[str, Any]:
        """The chunk of the stream's next piece."""
        raise NotImplementedError

    def usage(self, usage: Usage) -> dict[str, Any]:
        """The stream's last chunk: no choices, the usage."""
        return usage_chunk(self.ids, usage, self.chunk_object)


class ChatBodies(AnswerBodies):
    """A chat completion's bodies; its stream opens with the assistant's role. It remembers
    the calls it streamed, so that a cut call none of whose deltas went out (cut before its
    name was written, named by the tool choice) is sent with the last chunk."""

    chunk_object = "chat.completion.chunk"

    def __init__(self, ids: ResponseIds, logprobs: bool, *, index: int = 0) -> None:
        super().__init__(ids, logprobs, index=index)
        self._streamed: set[str] = set()
        self._calls = 0

    def whole(self, result: CallResult) -> dict[str, Any]:
        return chat_response(self.ids, result, self.logprobs, index=self.index)

    def opening(self) -> dict[str, Any] | None:
        return chat_chunk(self.ids, None, self.logprobs, first=True, index=self.index)

    def chunk(self, piece: ToolStreamChunk) -> dict[str, Any]:
        body = chat_chunk(self.ids, piece, self.logprobs, index=self.index)
        for delta in piece.tool_call_deltas:
            self._calls = max(self._calls, delta.index + 1)
            if delta.id is not None:
                self._streamed.add(delta.id)
        unsent = [call for call in _named(piece.invalid_calls) if call.id not in self._streamed]
        if unsent:
            deltas = body["choices"][0]["delta"].setdefault("tool_calls", [])
            for call in unsent:
                deltas.append({"index": self._calls} | _cut_call(call))
                self._calls += 1
        return body


class CompletionBodies(AnswerBodies):
    """A legacy completion's bodies; each chunk knows the characters sent before it."""

    chunk_object = "text_completion"

    def __init__(self, ids: ResponseIds, logprobs: bool, *, index: int = 0) -> None:
        super().__init__(ids, logprobs, index=index)
        self._sent = 0

    def whole(self, result: CallResult) -> dict[str, Any]:
        return completion_response(self.ids, result, self.logprobs, index=self.index)

    def chunk(self, piece: ToolStreamChunk) -> dict[str, Any]:
        body = completion_chunk(self.ids, piece, self.logprobs, self._sent, index=self.index)
        self._sent += len(piece.text)
        return body
