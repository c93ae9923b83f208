"""A chat adapter's calls, from keywords to a call ready to run.

Every call of every chat adapter goes the same way: merge the adapter's defaults with the
call's keywords (``CallOptions``), find the engine (the adapter's, or a per-call model's),
and make what builds the plan (translating messages, reading images, planning tools or a
response format). ``CallSite.prepare`` does this for threads and ``aprepare`` for asyncio (a
first load on a thread); the ``PreparedCall`` then runs whole or streamed on the executors.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..engine import ChatMessage, InferenceEngine
from ..multimodal import ImagePolicy
from ..tools import CutCalls, ToolStreamChunk
from . import execute
from .binding import EngineBinding
from .options import CallOptions, defaults_of
from .plan import CallPlan, CallResult, ImageReader, chat_plan_factory, request_of
from .results import CutJson
from .settings import EngineBound

__all__ = ["CallSite", "MessagesOf", "PreparedCall"]

MessagesOf = Callable[[ImageReader | None], Sequence[ChatMessage | Mapping[str, Any]]]
"""Translates a call's framework messages, reading their images with the reader given."""


@dataclass(frozen=True)
class PreparedCall:
    """One call, its engine found and its plan ready to build: run it one of four ways."""

    engine: InferenceEngine
    options: CallOptions
    plan: Callable[[], CallPlan]
    retry: execute.RetryPolicy

    def generate(self) -> CallResult:
        return execute.generate(self.engine, self.plan, self.retry)

    async def agenerate(self) -> CallResult:
        return await execute.agenerate(self.engine, self.plan, self.retry)

    def stream(self) -> Generator[ToolStreamChunk, None, None]:
        return execute.stream(self.engine, self.plan, self.retry)

    def astream(self) -> AsyncGenerator[ToolStreamChunk, None]:
        return execute.astream(self.engine, self.plan, self.retry)


@dataclass(frozen=True)
class CallSite:
    """What a chat adapter brings to each of its calls.

    Attributes:
        binding: The adapter's engine binding.
        owner: The adapter's name, for errors.
        defaults: The adapter's fields that calls may override (``defaults_of``).
        image_policy: Which image sources are read.
        retry: Retries of a full queue (before the first token only).
        cut_json: What a structured call does when ``max_tokens`` cuts its JSON.
        cut_calls: What a tool call does when ``max_tokens`` cuts a call.
    """

    binding: EngineBinding
    owner: str
    defaults: Mapping[str, Any]
    image_policy: ImagePolicy
    retry: execute.RetryPolicy
    cut_json: CutJson = "raise"
    cut_calls: CutCalls = "raise"

    @classmethod
    def of(
        cls,
        adapter: EngineBound,
        owner: str,
        *,
        cut_json: CutJson = "raise",
        cut_calls: CutCalls = "raise",
    ) -> CallSite:
        """The call site of an adapter with the shared settings fields (``CallSettings``,
        ``SamplingSettings``, ``EngineSettings``) and ``max_retries``."""
        return cls(
            adapter.binding,
            owner,
            defaults_of(adapter),
            getattr(adapter, "image_policy"),  # noqa: B009 -- a field of the CallSettings mixin
            execute.RetryPolicy(max_retries=getattr(adapter, "max_retries", 0)),
            cut_json,
            cut_calls,
        )

    def options(self, kwargs: Mapping[str, Any], *, chat: bool = True) -> CallOptions:
        return CallOptions.merge(self.defaults, kwargs, owner=self.owner, chat=chat)

    def prepare(
        self,
        kwargs: Mapping[str, Any],
        messages_of: MessagesOf | None = None,
        *,
        prompt: str | None = None,
        chat: bool = True,
    ) -> PreparedCall:
        """A chat call (``messages_of``) or a raw completion of ``prompt``, ready to run;
        ``chat=False`` refuses tools and response formats (completion calls)."""
        options = self.options(kwargs, chat=chat)
        return self._prepared(self.binding.get(options.model), options, messages_of, prompt)

    async def aprepare(
        self,
        kwargs: Mapping[str, Any],
        messages_of: MessagesOf | None = None,
        *,
        prompt: str | None = None,
        chat: bool = True,
    ) -> PreparedCall:
        """``prepare`` for asyncio: a first load of the weights runs on a thread."""
        options = self.options(kwargs, chat=chat)
        engine = await self.binding.aget(options.model)
        return self._prepared(engine, options, messages_of, prompt)

    def _prepared(
        self,
        engine: InferenceEngine,
        options: CallOptions,
        messages_of: MessagesOf | None,
        prompt: str | None,
    ) -> PreparedCall:
        if messages_of is None:
            assert prompt is not None, "a call needs messages or a prompt"
            raw = CallPlan(request_of(options, prompt=prompt))
            return PreparedCall(engine, options, lambda: raw, self.retry)
        plan = chat_plan_factory(
            engine,
            options,
            messages_of,
            image_policy=self.image_policy,
            facts=self.binding,
            cut_json=self.cut_json,
            cut_calls=self.cut_calls,
        )
        return PreparedCall(engine, options, plan, self.retry)
