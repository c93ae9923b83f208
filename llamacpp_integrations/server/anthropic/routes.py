"""Anthropic's Messages endpoints: ``POST /v1/messages`` (whole or streamed) and
``POST /v1/messages/count_tokens``, answering failures in Anthropic's shape.

Each reads its body, leases the model it names and builds its plan as the OpenAI chat endpoint
does (``ServerSettings.chat_plan``, the same tool, structured-output and reasoning handling as
the framework adapters); the shared plumbing is ``exchange.Exchange``. A streamed answer's plan
is built before the stream starts, so that ``message_start`` can tell the prompt's tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...client import CallOptions, CallPlan, CallResult, agenerate, astream
from ...engine import InferenceEngine
from ..exchange import Exchange, Leases
from ..roster import ModelLease
from ..settings import ServerSettings
from ..streaming import until_disconnect
from .bodies import MessageShape
from .errors import ANTHROPIC_SHAPE
from .messages import anthropic_messages_reader
from .options import count_options, message_options
from .schemas import CountTokensBody, MessagesBody
from .stream import MessageEvents

__all__ = ["AnthropicEndpoints", "planned_with_tokens"]

MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"


def planned_with_tokens(
    engine: InferenceEngine, build: Callable[[], CallPlan]
) -> tuple[CallPlan, int]:
    """A call's plan, and how many tokens its prompt is (slow: run it on a thread)."""
    plan = build()
    return plan, engine.count_prompt_tokens(plan.request)


class AnthropicEndpoints:
    """The Anthropic route handlers, over the served models."""

    def __init__(self, exchange: Exchange, settings: ServerSettings) -> None:
        self.exchange = exchange
        self.settings = settings
        self.metrics = exchange.metrics

    def _plan(
        self, model: ModelLease, options: CallOptions, body: CountTokensBody
    ) -> Callable[[], CallPlan]:
        # A cut answer comes back with stop_reason "max_tokens".
        messages = anthropic_messages_reader(body.system, body.messages)
        return self.settings.chat_plan(model, options, messages)

    async def messages(self, request: Request) -> Response:
        """``POST /v1/messages``."""
        return await self.exchange.run(
            MESSAGES, lambda leases: self._messages(request, leases), ANTHROPIC_SHAPE
        )

    async def _messages(self, request: Request, leases: Leases) -> Response:
        body = await self.exchange.body(request, MessagesBody)
        options = message_options(
            body, timeout=self.settings.request_timeout, defaults=self.settings.call_defaults
        )
        model = await leases.take(body.model)
        build = self._plan(model, options, body)
        thinking = body.thinking
        shape = MessageShape.new(
            model.name,
            show_thinking=thinking is None or thinking.display != "omitted",
        )
        if not body.stream:
            result: CallResult = await until_disconnect(request, agenerate(model.engine, build))
            self.metrics.answered(result.completion.usage, result.completion.timings)
            return JSONResponse(shape.whole(result))
        plan, prompt_tokens = await asyncio.to_thread(planned_with_tokens, model.engine, build)
        pieces = astream(model.engine, plan)
        first = await self.exchange.first(request, pieces)
        message = MessageEvents(shape)

        async def events() -> AsyncGenerator[bytes, None]:
            for event in message.opening(prompt_tokens):
                yield event
            async for piece in self.exchange.pieces(first, pieces):
                for event in message.piece(piece):
                    yield event

        return self.exchange.stream(MESSAGES, pieces, events(), ANTHROPIC_SHAPE)

    async def count_tokens(self, request: Request) -> Response:
        """``POST /v1/messages/count_tokens``: the tokens of the prompt the same body would
        make (tools and the thinking switch included), as generation counts them."""
        return await self.exchange.run(
            COUNT_TOKENS, lambda leases: self._count(request, leases), ANTHROPIC_SHAPE
        )

    async def _count(self, request: Request, leases: Leases) -> Response:
        body = await self.exchange.body(request, CountTokensBody)
        options = count_options(body)
        model = await leases.take(body.model)
        build = self._plan(model, options, body)
        _, tokens = await asyncio.to_thread(planned_with_tokens, model.engine, build)
        return JSONResponse({"input_tokens": tokens})
