"""OpenAI's endpoints: each reads its body, leases the model it names, runs the call and
answers (the shared plumbing is ``exchange.Exchange``).

A client that disconnects cancels its engine request, streamed or not. Chat and legacy
completions share one way of answering (``Endpoints._generation``), whole or streamed; an
answer's latencies are recorded once, when it ends (``ServerMetrics.answered``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ...client import CallPlan, CallResult, agenerate, astream
from ...engine import InferenceEngine
from ..chat_messages import messages_reader
from ..errors import ApiError
from ..exchange import Exchange, Leases
from ..metrics import CONTENT_TYPE, StatsSource
from ..roster import ModelLease, model_card
from ..settings import ServerSettings
from ..streaming import sse, until_disconnect
from .bodies import (
    AnswerBodies,
    ChatBodies,
    CompletionBodies,
    ResponseIds,
    embedding_response,
)
from .choices import answer_choices
from .options import chat_options, completion_options, completion_request
from .schemas import ChatCompletionBody, CompletionBody, EmbeddingBody, SamplingFields

__all__ = ["EmbeddingInputs", "Endpoints", "chat_plan", "embedding_inputs"]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
EMBEDDINGS = "/v1/embeddings"


@dataclass(frozen=True)
class EmbeddingInputs:
    """An embeddings request's inputs as texts, and how many tokens they are (each input
    tokenized once, as the engine tokenizes it to embed it)."""

    texts: list[str]
    tokens: int


def chat_plan(
    body: ChatCompletionBody, model: ModelLease, settings: ServerSettings
) -> Callable[[], CallPlan]:
    """What builds the plan of a chat completion on ``model`` (``/apply-template`` renders the
    same plan's prompt). The model's context bounds an answer that sets no ``max_tokens`` (a
    reasoning effort's budget is a share of it)."""
    options = chat_options(
        body,
        timeout=settings.request_timeout,
        context=model.engine.info.n_ctx_per_seq,
        defaults=settings.call_defaults,
    )
    return settings.chat_plan(model, options, messages_reader(body.messages))


class Endpoints:
    """The OpenAI route handlers (chat, legacy completions, embeddings, models), health and
    metrics, over the served models."""

    def __init__(self, exchange: Exchange, settings: ServerSettings) -> None:
        self.exchange = exchange
        self.settings = settings
        self.metrics = exchange.metrics

    async def _generation(
        self,
        request: Request,
        endpoint: str,
        engine: InferenceEngine,
        plan: CallPlan | Callable[[], CallPlan],
        body: SamplingFields,
        bodies: AnswerBodies,
    ) -> Response:
        """Run ``plan`` and answer with ``bodies``: whole, or streamed when ``body`` asks (``n``
        answers when it asks for several: see ``choices``)."""
        if (body.n or 1) > 1:
            return await answer_choices(
                self.exchange, request, endpoint, engine, plan, body, bodies
            )
        if not body.stream:
            result: CallResult = await until_disconnect(request, agenerate(engine, plan))
            self.metrics.answered(result.completion.usage, result.completion.timings)
            return JSONResponse(bodies.whole(result))
        pieces = astream(engine, plan)
        first = await self.exchange.first(request, pieces)
        usage = bool(body.stream_options and body.stream_options.include_usage)

        async def events() -> AsyncGenerator[bytes, None]:
            if (opening := bodies.opening()) is not None:
                yield sse(opening)
            async for piece in self.exchange.pieces(first, pieces):
                yield sse(bodies.chunk(piece))
                if usage and piece.usage is not None:
                    yield sse(bodies.usage(piece.usage))

        return self.exchange.stream(endpoint, pieces, events())

    # ---- endpoints -----------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        return await self.exchange.run(CHAT, lambda leases: self._chat(request, leases))

    async def _chat(self, request: Request, leases: Leases) -> Response:
        body = await self.exchange.body(request, ChatCompletionBody)
        model = await leases.take(body.model)
        plan = chat_plan(body, model, self.settings)
        ids = ResponseIds("chatcmpl", uuid.uuid4().hex[:24], model.name)
        bodies = ChatBodies(ids, logprobs=bool(body.logprobs))
        return await self._generation(request, CHAT, model.engine, plan, body, bodies)

    async def completions(self, request: Request) -> Response:
        return await self.exchange.run(COMPLETIONS, lambda leases: self._complete(request, leases))

    async def _complete(self, request: Request, leases: Leases) -> Response:
        body = await self.exchange.body(request, CompletionBody)
        options = completion_options(
            body, timeout=self.settings.request_timeout, defaults=self.settings.call_defaults
        )
        model = await leases.take(body.model)
        plan = CallPlan(completion_request(body, options))
        ids = ResponseIds("cmpl", plan.request.request_id, model.name)
        bodies = CompletionBodies(ids, logprobs=body.logprobs is not None)
        return await self._generation(request, COMPLETIONS, model.engine, plan, body, bodies)

    async def embeddings(self, request: Request) -> Response:
        return await self.exchange.run(EMBEDDINGS, lambda leases: self._embed(request, leases))

    async def _embed(self, request: Request, leases: Leases) -> Response:
        body = await self.exchange.body(request, EmbeddingBody)
        model = await leases.take(body.model)
        engine = model.engine
        if body.dimensions is not None and body.dimensions != engine.info.n_embd:
            raise ApiError(
                400,
                f"this model's embeddings have {engine.info.n_embd} dimensions",
                param="dimensions",
            )
        inputs = await asyncio.to_thread(embedding_inputs, engine, body.input)
        vectors = await until_disconnect(
            request, engine.aembed(inputs.texts, timeout=self.settings.request_timeout)
        )
        self.metrics.tokens(inputs.tokens, 0)
        return JSONResponse(
            embedding_response(vectors, model.name, body.encoding_format, inputs.tokens)
        )

    async def models(self, request: Request) -> Response:
        cards = [model_card(card) for card in self.exchange.roster.cards()]
        return JSONResponse({"object": "list", "data": cards})

    async def model(self, request: Request) -> Response:
        for card in self.exchange.roster.cards():
            if card.name == request.path_params["model"]:
                return JSONResponse(model_card(card))
        error = ApiError(404, "no such model", code="model_not_found", param="model")
        return JSONResponse(error.body(), 404)

    async def health(self, request: Request) -> Response:
        if any(model.engine.closed for model in self.exchange.roster.loaded()):
            return JSONResponse({"status": "closed"}, 503)
        return JSONResponse({"status": "ok"})

    async def prometheus(self, request: Request) -> Response:
        loaded = self.exchange.roster.loaded()
        engine = loaded[0].engine if len(loaded) == 1 else None
        stats = engine.stats() if isinstance(engine, StatsSource) else None
        return PlainTextResponse(self.metrics.render(stats), media_type=CONTENT_TYPE)


def embedding_inputs(
    engine: InferenceEngine, given: str | list[str] | list[int] | list[list[int]]
) -> EmbeddingInputs:
    """Embedding inputs as texts (token ids, which OpenAI also takes, are detokenized),
    counted in the same pass: each text is tokenized once, the way the engine tokenizes what
    it embeds (special tokens added), for the usage."""
    texts = _texts(engine, given)
    tokens = sum(len(engine.tokenize(text, add_special=True)) for text in texts)
    return EmbeddingInputs(texts, tokens)


def _texts(
    engine: InferenceEngine, given: str | list[str] | list[int] | list[list[int]]
) -> list[str]:
    if isinstance(given, str):
        return [given]
    if not given:
        raise ApiError(400, "input is empty", param="input")
    if all(isinstance(item, str) for item in given):
        return [str(item) for item in given]
    if all(isinstance(item, int) for item in given):
        return [engine.detokenize([t for t in given if isinstance(t, int)])]
    return [engine.detokenize(item) for item in given if isinstance(item, list)]
