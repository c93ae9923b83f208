"""Reading a call's answer, whole (``read_answer``) or streamed (``ChunkReader``).

The same reading serves plain, structured and tool calls, and a streamed answer ends where the
whole one does. A reasoning model's thinking comes from the engine already split from the
answer (``Completion.reasoning``, ``StreamChunk.reasoning``): the readers see the answer only,
and the reasoning is passed along beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..engine import Completion, StreamChunk, TokenLogprob
from ..errors import OutputTruncatedError
from ..tools import (
    InvalidToolCall,
    ToolAnswerReader,
    ToolCall,
    ToolCallPlan,
    ToolStreamChunk,
    read_structured,
    read_tool_answer,
)

__all__ = ["CallResult", "ChunkReader", "CutJson", "openai_logprobs", "read_answer"]

CutJson = Literal["raise", "keep"]
"""What a structured call does when ``max_tokens`` cuts its JSON: raise
``OutputTruncatedError``, or keep the text (with ``finish_reason="length"``) for a lenient
parser to read."""


@dataclass(frozen=True)
class CallResult:
    """A whole answer: its text, tool calls, parsed value (structured calls), and the engine's
    completion (usage, timings, log-probabilities); the calls ``max_tokens`` cut short, the
    count of repeated calls the loop guard kept out. A reasoning model's reasoning is
    ``completion.reasoning``, kept out of ``content``."""

    content: str
    tool_calls: tuple[ToolCall, ...]
    completion: Completion
    value: Any = None
    invalid_calls: tuple[InvalidToolCall, ...] = ()
    repeats_prevented: int = 0

    @property
    def reasoning(self) -> str:
        """A reasoning model's thinking (``""`` for other models)."""
        return self.completion.reasoning

    @property
    def reasoning_tokens(self) -> int:
        """How many of the answer's tokens were thinking."""
        return self.completion.usage.reasoning_tokens

    @property
    def finish_reason(self) -> str:
        """``"tool_calls"`` when the answer calls tools (``"length"`` when one was cut short),
        else the completion's reason."""
        if self.invalid_calls:
            return "length"
        return "tool_calls" if self.tool_calls else self.completion.finish_reason


def openai_logprobs(entries: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    """Log-probabilities in OpenAI's chat ``logprobs.content`` shape: per token its text,
    log-probability, bytes and ``top_logprobs`` (LangChain's ``response_metadata`` and the
    server's chat answers both use it)."""
    return [
        {
            "token": entry.token,
            "logprob": entry.logprob,
            "bytes": list(entry.bytes),
            "top_logprobs": [
                {"token": top.token, "logprob": top.logprob, "bytes": list(top.bytes)}
                for top in entry.top
            ],
        }
        for entry in entries
    ]


def read_answer(
    completion: Completion,
    *,
    tools: ToolCallPlan | None,
    structured: bool,
    cut_json: CutJson,
) -> CallResult:
    """The whole answer of ``completion`` (see ``ChunkReader.read`` for what raises)."""
    if tools is not None:
        result = read_tool_answer(tools, completion)
        return CallResult(
            result.content,
            result.tool_calls,
            completion,
            invalid_calls=result.invalid_calls,
            repeats_prevented=result.repeats_prevented,
        )
    if structured and (cut_json == "raise" or completion.finish_reason != "length"):
        return CallResult(completion.text, (), completion, read_structured(completion).value)
    return CallResult(completion.text, (), completion)


class ChunkReader:
    """Reads one streamed answer: engine chunks in, ``ToolStreamChunk`` s out (reasoning and
    text, call deltas, and on the last one the finish reason, usage and finished calls)."""

    def __init__(self, tools: ToolCallPlan | None, structured: bool, cut_json: CutJson) -> None:
        self._tools = None if tools is None else ToolAnswerReader(tools)
        self._structured = structured and cut_json == "raise"
        self._text: list[str] = []

    def read(self, chunk: StreamChunk) -> ToolStreamChunk | None:
        """The piece ``chunk`` adds, ``None`` when there is nothing new to show.

        Raises:
            OutputTruncatedError: ``max_tokens`` cut a call, or a structured answer whose plan
                says so.
        """
        piece = self._answer(chunk)
        if not chunk.reasoning:
            return piece
        if piece is None:
            return ToolStreamChunk(chunk.request_id, "", reasoning=chunk.reasoning)
        return replace(piece, reasoning=chunk.reasoning)

    def _answer(self, chunk: StreamChunk) -> ToolStreamChunk | None:
        if self._tools is not None:
            return self._tools.read(chunk)
        if self._structured:
            self._text.append(chunk.text)
            if chunk.finish_reason == "length":
                raise OutputTruncatedError(
                    "max_tokens ended the JSON answer early",
                    request_id=chunk.request_id,
                    partial_text="".join(self._text),
                )
        if not chunk.text and not chunk.logprobs and chunk.finish_reason is None:
            return None
        return ToolStreamChunk.of_text(chunk)
