"""An OpenAI-compatible HTTP server over any ``InferenceEngine`` (``llamacpp-integrations serve``).

* ``create_app``: the ASGI app (Starlette): chat and legacy completions (streamed as SSE),
  embeddings, models, health and Prometheus metrics, with OpenAI-shaped errors;
* ``serve``: run it with uvicorn, with a graceful shutdown.

The modules, one job each: ``schemas`` (request bodies), ``requests`` (bodies to the client
core's calls), ``responses`` (answers to OpenAI bodies), ``streaming`` (SSE and client
disconnects), ``errors`` (typed errors to statuses), ``security`` (API key, body limit),
``metrics`` (Prometheus text), ``routes`` (the handlers) and ``app`` (putting them together).

Needs the ``server`` extra (``pip install 'llamacpp-integrations[server]'``).
"""

from __future__ import annotations

from .app import DEFAULT_MAX_BODY_BYTES, create_app, default_model_name
from .errors import ERROR_TABLE, ApiError, ErrorRow
from .routes import ServerSettings
from .run import serve

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "ERROR_TABLE",
    "ApiError",
    "ErrorRow",
    "ServerSettings",
    "create_app",
    "default_model_name",
    "serve",
]
