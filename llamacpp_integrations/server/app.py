"""The ASGI application: ``create_app`` puts the endpoints, metrics and gatekeepers together.

It is written against ``InferenceEngine`` only, so it serves the local engine, a remote one,
or a fake in tests. Security is off until asked for, except the body limit: no API key, no
CORS, and image URLs refused (in-memory ``data:`` images only) unless ``image_policy`` allows
them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route

from ..client import model_display_name
from ..engine import InferenceEngine
from ..multimodal import DEFAULT_IMAGE_POLICY, ImagePolicy
from .anthropic.errors import anthropic_error_body, speaks_anthropic
from .anthropic.routes import AnthropicEndpoints
from .errors import ApiError
from .exchange import Exchange
from .metrics import ServerMetrics
from .openai.extras import LlamaExtras
from .openai.lora_adapters import LORA_ADAPTERS, LoraAdapters
from .openai.rerank import RERANK_PATHS, Reranker
from .openai.routes import Endpoints
from .responses_api.routes import ResponsesApi
from .roster import ModelRoster, OneModel
from .security import ApiKeyMiddleware, BodyLimitMiddleware
from .settings import ServerSettings

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app", "default_model_name"]

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
"""Room for an image or two as base64 (an image may be 20 MiB encoded, a third more in base64)."""


def default_model_name(engine: InferenceEngine) -> str:
    """The id the model is listed under: its name by the package's one rule
    (``client.model_display_name``: the file name without ``.gguf``)."""
    return model_display_name(engine.info.path)


def refusal_body(path: str, error: ApiError) -> dict[str, Any]:
    """A gatekeeper's refusal (a bad key, a body too large) in the error shape of the API
    family ``path`` belongs to: Anthropic's on its endpoints, OpenAI's everywhere else."""
    return anthropic_error_body(error) if speaks_anthropic(path) else error.body()


def create_app(
    engine: InferenceEngine | None = None,
    *,
    roster: ModelRoster | None = None,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    image_policy: ImagePolicy = DEFAULT_IMAGE_POLICY,
    cors_origins: Sequence[str] | None = None,
    model_name: str | None = None,
    request_timeout: float | None = None,
    close_engine: bool = False,
    call_defaults: Mapping[str, Any] | None = None,
) -> Starlette:
    """An OpenAI-compatible ASGI app serving ``engine``, or the models of ``roster``.

    Args:
        engine: The engine that answers (any ``InferenceEngine``), under every model name.
        roster: Instead of ``engine``: the served models, e.g. ``OnDemandRoster``'s several
            models loaded on demand; closed when the app shuts down.
        api_key: Require ``Authorization: Bearer <api_key>`` (or ``x-api-key: <api_key>``,
            as Anthropic's clients send it) on every endpoint but ``/health`` (``None``: no
            key).
        max_body_bytes: Largest request body accepted (413 above it).
        image_policy: Which image sources ``image_url`` parts may use; the default reads
            ``data:`` URIs only, no URLs and no local files.
        cors_origins: Origins allowed to call from a browser (``None``: CORS off).
        model_name: The model's id in ``/v1/models`` (default: the file name).
        request_timeout: Seconds a generation may take before it fails with 504.
        close_engine: Close the engine when the app shuts down (the CLI's server owns its
            engine; an app given a shared engine leaves it open).
        call_defaults: What requests leave out (``temperature``, ``stop``, ``max_tokens``...)
            takes from here instead of the engine's defaults (``ServerSettings``); ``serve``
            passes an ``ollama://`` model's manifest parameters.

    Returns:
        A Starlette application; run it with any ASGI server (``serve`` uses uvicorn).
    """
    if roster is None:
        if engine is None:
            raise TypeError("create_app needs an engine or a roster")
        name = model_name or default_model_name(engine)
        roster = OneModel(engine, name, owns_engine=close_engine)
    elif engine is not None:
        raise TypeError("create_app serves an engine or a roster, not both")
    exchange = Exchange(roster, ServerMetrics())
    settings = ServerSettings(
        image_policy=image_policy,
        request_timeout=request_timeout,
        call_defaults=dict(call_defaults or {}),
    )
    endpoints = Endpoints(exchange, settings)
    responses_api = ResponsesApi(exchange, settings)
    anthropic = AnthropicEndpoints(exchange, settings)
    extras = LlamaExtras(exchange, settings)
    reranker = Reranker(exchange, settings)
    loras = LoraAdapters(exchange)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        roster.close()  # in-flight requests were finished or cancelled by now

    routes = [
        Route("/v1/chat/completions", endpoints.chat_completions, methods=["POST"]),
        Route("/v1/completions", endpoints.completions, methods=["POST"]),
        Route("/v1/responses", responses_api.create, methods=["POST"]),
        Route("/v1/messages", anthropic.messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", anthropic.count_tokens, methods=["POST"]),
        Route("/v1/embeddings", endpoints.embeddings, methods=["POST"]),
        Route("/v1/models", endpoints.models, methods=["GET"]),
        Route("/v1/models/{model:path}", endpoints.model, methods=["GET"]),
        Route("/health", endpoints.health, methods=["GET"]),
        Route("/metrics", endpoints.prometheus, methods=["GET"]),
        # llama-server's extras, on the paths it serves them on.
        Route("/tokenize", extras.tokenize, methods=["POST"]),
        Route("/detokenize", extras.detokenize, methods=["POST"]),
        Route("/apply-template", extras.apply_template, methods=["POST"]),
        Route(LORA_ADAPTERS, loras.list, methods=["GET"]),
        Route(LORA_ADAPTERS, loras.set, methods=["POST"]),
        *(Route(path, reranker.rerank, methods=["POST"]) for path in RERANK_PATHS),
    ]
    # Outermost first: CORS answers preflights (and marks refusals), then the key, then the
    # body limit, so a stranger's body is never read.
    middleware = []
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST", "OPTIONS"],
                # Anthropic's clients send their key and API version in headers of their own.
                allow_headers=["Authorization", "Content-Type", "x-api-key", "anthropic-version"],
            )
        )
    if api_key:
        middleware.append(Middleware(ApiKeyMiddleware, api_key=api_key, shape=refusal_body))
    middleware.append(Middleware(BodyLimitMiddleware, max_bytes=max_body_bytes, shape=refusal_body))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.endpoints = endpoints
    return app
