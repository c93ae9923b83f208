"""The second half of an answer whose calls were all repeats: the model answers instead.

The loop guard (``tools.loop_guard``) drops a call that repeats one already answered in the
conversation. When that leaves an answer with no call and nothing said, the executors continue
it with a reply (``follow_up_plan``), and the caller sees one answer: the text before the calls,
the reply after it, the tokens and time of both parts.
"""

from __future__ import annotations

from dataclasses import replace

from ..engine import Completion, Timings, Usage
from ..tools import ToolStreamChunk, follow_up_request
from .plan import CallPlan, CallResult

__all__ = ["follow_up_plan", "merged_piece", "merged_result", "needs_answer"]


def needs_answer(plan: CallPlan, result: CallResult | ToolStreamChunk) -> bool:
    """Whether the loop guard dropped every call of this (last) part of an answer."""
    return (
        plan.tools is not None
        and result.repeats_prevented > 0
        and not result.tool_calls
        and not result.invalid_calls
    )


def follow_up_plan(
    plan: CallPlan, *, prompt: str, answer_so_far: str, generated_tokens: int
) -> CallPlan | None:
    """The continuation of ``plan``'s answer with a reply and no call; ``prompt`` is the tool
    request rendered. ``None`` when ``max_tokens`` leaves no room."""
    assert plan.tools is not None and plan.tools.syntax is not None
    request = follow_up_request(
        plan.tools.request,
        plan.tools.syntax,
        prompt=prompt,
        answer_so_far=answer_so_far,
        generated_tokens=generated_tokens,
        answer_schema=plan.tools.answer_schema,
    )
    return None if request is None else CallPlan(request)


def _usage(first: Usage, second: Usage) -> Usage:
    return Usage(
        prompt_tokens=first.prompt_tokens,
        completion_tokens=first.completion_tokens + second.completion_tokens,
        cached_prompt_tokens=first.cached_prompt_tokens,
        prompt_image_tokens=first.prompt_image_tokens,
        reasoning_tokens=first.reasoning_tokens + second.reasoning_tokens,
    )


def _timings(first: Timings, second: Timings) -> Timings:
    return Timings(
        queued_s=first.queued_s,
        time_to_first_token_s=first.time_to_first_token_s,
        total_s=first.total_s + second.total_s,
        prompt_eval_s=first.prompt_eval_s + second.prompt_eval_s,
        generation_s=first.generation_s + second.generation_s,
    )


def merged_result(first: CallResult, second: CallResult | None) -> CallResult:
    """One answer from its two parts (``second`` is ``None`` when no room was left)."""
    if second is None:
        out_of_room = replace(first.completion, finish_reason="length")
        return replace(first, completion=out_of_room)
    a, b = first.completion, second.completion
    completion = Completion(
        request_id=a.request_id,
        text=a.text + b.text,
        token_ids=a.token_ids + b.token_ids,
        finish_reason=b.finish_reason,
        usage=_usage(a.usage, b.usage),
        timings=_timings(a.timings, b.timings),
        logprobs=None if a.logprobs is None else a.logprobs + (b.logprobs or ()),
        reasoning=a.reasoning + b.reasoning,
        stop_string=b.stop_string,
    )
    return replace(first, content=first.content + second.content, completion=completion)


def merged_piece(first_last: ToolStreamChunk, second: ToolStreamChunk) -> ToolStreamChunk:
    """A piece of the continuation, speaking for the whole answer: the first part's request
    id, and on the last piece the usage and timings of both parts."""
    if second.finish_reason is None:
        return replace(second, request_id=first_last.request_id)
    usage = second.usage
    if first_last.usage is not None and usage is not None:
        usage = _usage(first_last.usage, usage)
    timings = second.timings
    if first_last.timings is not None and timings is not None:
        timings = _timings(first_last.timings, timings)
    return replace(
        second,
        request_id=first_last.request_id,
        usage=usage,
        timings=timings,
        repeats_prevented=first_last.repeats_prevented,
    )
