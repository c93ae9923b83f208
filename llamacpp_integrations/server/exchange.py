"""What every endpoint does around its own translation: read the body, lease the model, count
the outcome, answer errors in the API's shape, and stream.

One ``Exchange`` serves all the API families (OpenAI chat and completions, Responses,
Anthropic Messages, the llama-server extras): each handler is a function of the request and
its ``Leases``, run by ``Exchange.run``, which gives the leased models back when the answer
ends (a stream's when its last event went out or its client left) and answers a failure in
the family's ``WireShape``.

Errors before the first token (a bad request, a full queue, a prompt too long) are answered
with their HTTP status, streams included: a stream's headers go out with its first piece. An
error after that ends the stream with the family's error event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from ..tools import ToolStreamChunk
from .errors import ApiError, api_error_of
from .metrics import ServerMetrics, outcome_of
from .roster import ModelLease, ModelRoster
from .streaming import DONE, ClientGone, EventStream, until_disconnect

__all__ = ["OPENAI_SHAPE", "Exchange", "Handler", "Leases", "Pieces", "WireShape"]

B = TypeVar("B", bound=BaseModel)

Pieces = AsyncGenerator[ToolStreamChunk, None]


@dataclass(frozen=True)
class WireShape:
    """How one API family writes an error: as a JSON body, and as a stream's last event;
    ``done`` is what ends every stream (OpenAI's ``[DONE]``; ``None``: nothing)."""

    error_body: Callable[[ApiError], dict[str, Any]]
    error_event: Callable[[ApiError], bytes]
    done: bytes | None


OPENAI_SHAPE = WireShape(ApiError.body, ApiError.sse, DONE)


class Leases:
    """The models one request leased from the roster, given back together when it ends."""

    def __init__(self, roster: ModelRoster) -> None:
        self._roster = roster
        self._held: list[ModelLease] = []

    async def take(self, name: str | None) -> ModelLease:
        """The model ``name`` (404 if the roster does not serve it), held until the end."""
        lease = await self._roster.lease(name)
        self._held.append(lease)
        return lease

    def release_all(self) -> None:
        for lease in self._held:
            lease.release()
        self._held.clear()


Handler = Callable[[Leases], Awaitable[Response]]


class Exchange:
    """The plumbing every endpoint shares, over the served models and the server's metrics."""

    def __init__(self, roster: ModelRoster, metrics: ServerMetrics) -> None:
        self.roster = roster
        self.metrics = metrics

    async def body(self, request: Request, schema: type[B]) -> B:
        """The request's JSON body as ``schema`` (400 naming the first field that is wrong)."""
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

    async def run(
        self, endpoint: str, handler: Handler, shape: WireShape = OPENAI_SHAPE
    ) -> Response:
        """``handler``'s answer, counted under ``endpoint``; a failure is answered in
        ``shape``. The models it leased are given back when the answer ends."""
        self.metrics.in_flight.inc()
        leases = Leases(self.roster)
        streaming = False
        try:
            response = await handler(leases)
            if isinstance(response, EventStream):  # it counts itself and frees them at its end
                streaming = True
                response.after_close(lambda _: leases.release_all())
            else:
                self.metrics.finished(endpoint, "ok")
            return response
        except Exception as error:  # every failure answers in the family's shape
            return self.failed(endpoint, error, shape)
        finally:
            if not streaming:
                self.metrics.in_flight.dec()
                leases.release_all()

    def failed(self, endpoint: str, error: BaseException, shape: WireShape) -> Response:
        """The answer to a failure before anything was sent (499 for a client gone)."""
        if isinstance(error, ClientGone | ClientDisconnect):  # gone while waiting or sending
            self.metrics.finished(endpoint, "disconnected")
            return Response(status_code=499)
        answer = api_error_of(error)
        self.metrics.finished(endpoint, outcome_of(answer.status))
        return JSONResponse(shape.error_body(answer), answer.status, headers=dict(answer.headers))

    def stream(
        self,
        endpoint: str,
        pieces: AsyncGenerator[Any, None],
        events: AsyncIterator[bytes],
        shape: WireShape = OPENAI_SHAPE,
    ) -> EventStream:
        """An SSE answer of ``events`` (made from ``pieces``, closed with the stream), counted
        under ``endpoint`` when it ends; an error after the headers becomes ``shape``'s error
        event."""
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
            self.metrics.in_flight.dec()
            outcome = "disconnected" if client_gone else "error" if state["error"] else "ok"
            self.metrics.finished(endpoint, outcome)

        return EventStream(guarded(), closed, error_event=shape.error_event, done=shape.done)

    async def first(self, request: Request, pieces: Pieces) -> ToolStreamChunk | None:
        """The first piece (errors before it become HTTP statuses), or ``None`` if none."""
        try:
            return await until_disconnect(request, anext(pieces))
        except StopAsyncIteration:
            return None
        except BaseException:
            await pieces.aclose()
            raise

    async def pieces(self, first: ToolStreamChunk | None, pieces: Pieces) -> Pieces:
        """The stream's pieces, ``first`` included, to the one that ends it (whose usage and
        timings are recorded before it is sent)."""
        piece = first
        while piece is not None:
            last = piece.finish_reason is not None
            if last:
                self.metrics.answered(piece.usage, piece.timings)
            yield piece
            piece = None if last else await anext(pieces, None)
