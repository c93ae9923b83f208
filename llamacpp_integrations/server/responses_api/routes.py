"""``POST /v1/responses``: OpenAI's Responses API over the same plan as chat completions.

The body is translated into the client core's ``CallOptions`` (``options``) and chat messages
(``inputs``), planned by ``client.chat_plan_factory`` and run by ``client.agenerate`` or
``client.astream`` as ``/v1/chat/completions`` runs them, so tools (a named ``tool_choice``
enforced by grammar), JSON formats and reasoning behave the same on both. Like the chat
endpoint, an answer cut by the output limit comes back cut (``cut_json`` and ``cut_calls``
``"keep"``), here as an ``incomplete`` response.

Nothing is stored: every request carries its whole conversation (``previous_response_id`` is
refused), and there is no ``GET /v1/responses/{id}``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...client import CallResult, agenerate, astream
from ..exchange import Exchange, Leases
from ..settings import ServerSettings
from ..streaming import until_disconnect
from .bodies import response_frame, whole_response
from .events import RESPONSES_SHAPE, ResponseEvents
from .inputs import responses_messages_reader
from .options import refuse_unsupported, responses_options
from .schemas import ResponsesBody

__all__ = ["RESPONSES", "ResponsesApi"]

RESPONSES = "/v1/responses"


class ResponsesApi:
    """The Responses API's handler, over the served models."""

    def __init__(self, exchange: Exchange, settings: ServerSettings) -> None:
        self.exchange = exchange
        self.settings = settings

    async def create(self, request: Request) -> Response:
        """``POST /v1/responses``: a whole ``response``, or its events when ``stream`` is set."""
        return await self.exchange.run(
            RESPONSES, lambda leases: self._create(request, leases), RESPONSES_SHAPE
        )

    async def _create(self, request: Request, leases: Leases) -> Response:
        body = await self.exchange.body(request, ResponsesBody)
        refuse_unsupported(body)  # before a model is leased (maybe loaded) for nothing
        messages = responses_messages_reader(body)  # checks every input item now
        model = await leases.take(body.model)
        engine = model.engine
        options = responses_options(
            body,
            context=engine.info.n_ctx_per_seq,
            timeout=self.settings.request_timeout,
            defaults=self.settings.call_defaults,
        )
        plan = self.settings.chat_plan(model, options, messages)  # cut: an incomplete response
        frame = response_frame(body, options, model.name)
        if not body.stream:
            result: CallResult = await until_disconnect(request, agenerate(engine, plan))
            self.exchange.metrics.answered(result.completion.usage, result.completion.timings)
            return JSONResponse(whole_response(frame, result))
        pieces = astream(engine, plan)
        first = await self.exchange.first(request, pieces)
        events = ResponseEvents(frame)

        async def stream() -> AsyncGenerator[bytes, None]:
            for event in events.opening():
                yield event
            async for piece in self.exchange.pieces(first, pieces):
                for event in events.piece(piece):
                    yield event

        return self.exchange.stream(RESPONSES, pieces, stream(), events.shape())
