"""The endpoints: each reads its body, runs the call on the engine, and answers.

Errors before the first token (a bad request, a full queue, a prompt too long) are answered
with their HTTP status, streams included: a stream's headers go out with its first piece. An
error after that ends the stream with an error event. A client that disconnects cancels its
engine request, streamed or not. Chat and legacy completions share one way of answering
(``Endpoints._generation``), whole or streamed; an answer's latencies are recorded once, when
it ends (``ServerMetrics.answered``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ..client import CallPlan, CallResult, EngineBinding, agenerate, astream, chat_plan_factory
from ..engine import InferenceEngine
from ..multimodal import ImagePolicy
from ..tools import ToolStreamChunk
from .errors import ApiError, api_error_of
from .metrics import ServerMetrics, StatsSource, outcome_of
from .requests import chat_options, completion_options, completion_request, messages_reader
from .responses import (
    AnswerBodies,
    ChatBodies,
    CompletionBodies,
    ResponseIds,
    embedding_response,
)
from .schemas import ChatCompletionBody, CompletionBody, EmbeddingBody, SamplingFields
from .streaming import ClientGone, EventStream, sse, until_disconnect

__all__ = ["EmbeddingInputs", "Endpoints", "ServerSettings"]

B = TypeVar("B", bound=BaseModel)

Pieces = AsyncGenerator[ToolStreamChunk, None]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
EMBEDDINGS = "/v1/embeddings"


@dataclass(frozen=True)
class ServerSettings:
    """What the server holds every request to.

    Attributes:
        model_name: The model's id in ``/v1/models`` and in every answer (requests may name
            any model: one is served).
        image_policy: Which image sources ``image_url`` parts may use (in-memory data URIs
            only, by default).
        request_timeout: Seconds a generation may take from submission (``None``: no limit).
    """

    model_name: str
    image_policy: ImagePolicy
    request_timeout: float | None = None


@dataclass(frozen=True)
class EmbeddingInputs:
    """An embeddings request's inputs as texts, and how many tokens they are (each input
    tokenized once, as the engine tokenizes it to embed it)."""

    texts: list[str]
    tokens: int


@dataclass
class Endpoints:
    """The route handlers, over one engine."""

    engine: InferenceEngine
    settings: ServerSettings
    metrics: ServerMetrics = field(default_factory=ServerMetrics)

    def __post_init__(self) -> None:
        # Probing a template for tools and reasoning renders it a few times: once per template.
        self.facts = EngineBinding(model=None, settings={}, engine=self.engine)

    # ---- plumbing ------------------------------------------------------------------------

    async def _body(self, request: Request, schema: type[B]) -> B:
        raw = await request.body()
        try:
            data = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ApiError(400, "the request body is not JSON") from None
        if not isinstance(data, dict):
            raise ApiError(400, "the request body must be a JSON object")
        try:
            return schema.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            param = ".".join(str(part) for part in first["loc"]) or None
            raise ApiError(
                400, f"{param}: {first['msg']}", code="invalid_request", param=param
            ) from None

    def _failed(self, endpoint: str, error: BaseException) -> Response:
        if isinstance(error, ClientGone | ClientDisconnect):  # gone while waiting or sending
            self.metrics.finished(endpoint, "disconnected")
            return Response(status_code=499)
        answer = api_error_of(error)
        self.metrics.finished(endpoint, outcome_of(answer.status))
        return JSONResponse(answer.body(), answer.status, headers=dict(answer.headers))

    async def _run(self, endpoint: str, answer: Callable[[], Awaitable[Response]]) -> Response:
        self.metrics.in_flight += 1
        streaming = False
        try:
            response = await answer()
            streaming = isinstance(response, EventStream)  # it counts itself when it ends
            if not streaming:
                self.metrics.finished(endpoint, "ok")
            return response
        except Exception as error:  # every failure answers in OpenAI's shape
            return self._failed(endpoint, error)
        finally:
            if not streaming:
                self.metrics.in_flight -= 1

    def _stream(
        self,
        endpoint: str,
        pieces: AsyncGenerator[ToolStreamChunk, None],
        events: AsyncIterator[bytes],
    ) -> EventStream:
        state = {"error": False}

        async def guarded() -> AsyncGenerator[bytes, None]:
            try:
                async for event in events:
                    yield event
            except Exception as error:  # after the headers: an error event ends the stream
                state["error"] = True
                raise api_error_of(error) from error
            finally:
                await pieces.aclose()

        def closed(client_gone: bool) -> None:
            self.metrics.in_flight -= 1
            outcome = "disconnected" if client_gone else "error" if state["error"] else "ok"
            self.metrics.finished(endpoint, outcome)

        return EventStream(guarded(), closed)

    async def _first(
        self, request: Request, pieces: AsyncGenerator[ToolStreamChunk, None]
    ) -> ToolStreamChunk | None:
        """The first piece (errors before it become HTTP statuses), or ``None`` if none."""
        try:
            return await until_disconnect(request, anext(pieces))
        except StopAsyncIteration:
            return None
        except BaseException:
            await pieces.aclose()
            raise

    async def _pieces(self, first: ToolStreamChunk | None, pieces: Pieces) -> Pieces:
        """The stream's pieces, ``first`` included, to the one that ends it (whose usage and
        timings are recorded before it is sent)."""
        piece = first
        while piece is not None:
            last = piece.finish_reason is not None
            if last:
                self.metrics.answered(piece.usage, piece.timings)
            yield piece
            piece = None if last else await anext(pieces, None)

    async def _generation(
        self,
        request: Request,
        endpoint: str,
        plan: CallPlan | Callable[[], CallPlan],
        body: SamplingFields,
        bodies: AnswerBodies,
    ) -> Response:
        """Run ``plan`` and answer with ``bodies``: whole, or streamed when ``body`` asks."""
        if not body.stream:
            result: CallResult = await until_disconnect(request, agenerate(self.engine, plan))
            self.metrics.answered(result.completion.usage, result.completion.timings)
            return JSONResponse(bodies.whole(result))
        pieces = astream(self.engine, plan)
        first = await self._first(request, pieces)
        usage = bool(body.stream_options and body.stream_options.include_usage)

        async def events() -> AsyncGenerator[bytes, None]:
            if (opening := bodies.opening()) is not None:
                yield sse(opening)
            async for piece in self._pieces(first, pieces):
                yield sse(bodies.chunk(piece))
                if usage and piece.usage is not None:
                    yield sse(bodies.usage(piece.usage))

        return self._stream(endpoint, pieces, events())

    # ---- endpoints -----------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        return await self._run(CHAT, lambda: self._chat(request))

    async def _chat(self, request: Request) -> Response:
        body = await self._body(request, ChatCompletionBody)
        options = chat_options(body, timeout=self.settings.request_timeout)
        plan = chat_plan_factory(
            self.engine,
            options,
            messages_reader(body.messages),
            image_policy=self.settings.image_policy,
            facts=self.facts,
            cut_json="keep",  # as OpenAI: a cut answer comes back with finish_reason "length"
            cut_calls="keep",
        )
        ids = ResponseIds("chatcmpl", uuid.uuid4().hex[:24], self.settings.model_name)
        bodies = ChatBodies(ids, logprobs=bool(body.logprobs))
        return await self._generation(request, CHAT, plan, body, bodies)

    async def completions(self, request: Request) -> Response:
        return await self._run(COMPLETIONS, lambda: self._complete(request))

    async def _complete(self, request: Request) -> Response:
        body = await self._body(request, CompletionBody)
        options = completion_options(body, timeout=self.settings.request_timeout)
        plan = CallPlan(completion_request(body, options))
        ids = ResponseIds("cmpl", plan.request.request_id, self.settings.model_name)
        bodies = CompletionBodies(ids, logprobs=body.logprobs is not None)
        return await self._generation(request, COMPLETIONS, plan, body, bodies)

    async def embeddings(self, request: Request) -> Response:
        return await self._run(EMBEDDINGS, lambda: self._embed(request))

    async def _embed(self, request: Request) -> Response:
        body = await self._body(request, EmbeddingBody)
        if body.dimensions is not None and body.dimensions != self.engine.info.n_embd:
            raise ApiError(
                400,
                f"this model's embeddings have {self.engine.info.n_embd} dimensions",
                param="dimensions",
            )
        inputs = await asyncio.to_thread(self._inputs, body.input)
        vectors = await until_disconnect(
            request, self.engine.aembed(inputs.texts, timeout=self.settings.request_timeout)
        )
        self.metrics.tokens(inputs.tokens, 0)
        return JSONResponse(
            embedding_response(
                vectors, self.settings.model_name, body.encoding_format, inputs.tokens
            )
        )

    def _inputs(self, given: str | list[str] | list[int] | list[list[int]]) -> EmbeddingInputs:
        """Embedding inputs as texts (token ids, which OpenAI also takes, are detokenized),
        counted in the same pass: each text is tokenized once, the way the engine tokenizes
        what it embeds (special tokens added), for the usage."""
        texts = self._texts(given)
        tokens = sum(len(self.engine.tokenize(text, add_special=True)) for text in texts)
        return EmbeddingInputs(texts, tokens)

    def _texts(self, given: str | list[str] | list[int] | list[list[int]]) -> list[str]:
        if isinstance(given, str):
            return [given]
        if not given:
            raise ApiError(400, "input is empty", param="input")
        if all(isinstance(item, str) for item in given):
            return [str(item) for item in given]
        if all(isinstance(item, int) for item in given):
            return [self.engine.detokenize([t for t in given if isinstance(t, int)])]
        return [self.engine.detokenize(item) for item in given if isinstance(item, list)]

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_card()]})

    async def model(self, request: Request) -> Response:
        if request.path_params["model"] != self.settings.model_name:
            error = ApiError(404, "no such model", code="model_not_found", param="model")
            return JSONResponse(error.body(), 404)
        return JSONResponse(self._model_card())

    def _model_card(self) -> dict[str, Any]:
        info = self.engine.info
        return {
            "id": self.settings.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "llamacpp-integrations",
            "meta": {
                "n_ctx_per_seq": info.n_ctx_per_seq,
                "n_ctx_train": info.n_ctx_train,
                "n_embd": info.n_embd,
                "n_vocab": info.n_vocab,
                "n_params": info.n_params,
                "supports_images": info.supports_images,
            },
        }

    async def health(self, request: Request) -> Response:
        if self.engine.closed:
            return JSONResponse({"status": "closed"}, 503)
        return JSONResponse({"status": "ok"})

    async def prometheus(self, request: Request) -> Response:
        stats = self.engine.stats() if isinstance(self.engine, StatsSource) else None
        return PlainTextResponse(self.metrics.render(stats), media_type="text/plain; version=0.0.4")
