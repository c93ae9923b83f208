"""An OpenAI-compatible HTTP server over any ``InferenceEngine`` (``llamacpp-integrations serve``).

* ``create_app``: the ASGI app (Starlette): chat and legacy completions (streamed as SSE),
  embeddings, models, health and Prometheus metrics, with OpenAI-shaped errors;
* ``serve``: run it with uvicorn, with a graceful shutdown;
* ``OnDemandRoster``: several models in one server, each loaded on its first request and
  unloaded after ``keep_alive`` idle seconds (``served_model_files``: the models of paths and
  folders, named by their files).

The modules, one job each: ``schemas`` (request bodies), ``requests`` (bodies to the client
core's calls), ``responses`` (answers to OpenAI bodies), ``streaming`` (SSE and client
disconnects), ``errors`` (typed errors to statuses), ``security`` (API key, body limit),
``metrics`` (Prometheus text), ``exchange`` (what every endpoint of every API shares: the body,
the leased models, failures in the API's own shape, streams), ``roster`` (which engine answers
a request's ``model``), ``routes`` (OpenAI's handlers) and ``app`` (putting them together).
Beside them, for chat completions: ``chat_calls`` (a body's options with its reasoning asks
resolved: ``reasoning``, ``chat_template_kwargs``, ``reasoning_effort``, the last shared with
the Responses API in ``reasoning_effort``), ``field_policy``
(which undeclared fields are refused, which ignored) and ``choices`` (``n`` answers to one
request). llama-server's extras: ``llama_extras`` (``/tokenize``, ``/detokenize``,
``/apply-template``) and ``rerank`` (``/v1/rerank``).

OpenAI's Responses API (``POST /v1/responses``) has modules of its own, ``responses_api_*``:
``schemas``, ``requests`` (bodies and input items to the client core's calls), ``bodies`` (the
``response`` object), ``events`` (its stream) and ``routes``.

Anthropic's Messages API (``POST /v1/messages`` and ``/v1/messages/count_tokens``) has too,
``anthropic_*``: ``schemas``, ``messages`` (content blocks to the template's messages),
``requests`` (bodies to call options), ``responses`` (the ``message`` body), ``stream`` (its
events), ``errors`` (Anthropic's error shape) and ``routes``.

Needs the ``server`` extra (``pip install 'llamacpp-integrations[server]'``).
"""

from __future__ import annotations

from .app import DEFAULT_MAX_BODY_BYTES, create_app, default_model_name
from .errors import ERROR_TABLE, ApiError, ErrorRow
from .model_files import served_model_files
from .on_demand import DEFAULT_KEEP_ALIVE, OnDemandRoster
from .openai.routes import ServerSettings
from .run import serve

__all__ = [
    "DEFAULT_KEEP_ALIVE",
    "DEFAULT_MAX_BODY_BYTES",
    "ERROR_TABLE",
    "ApiError",
    "ErrorRow",
    "OnDemandRoster",
    "ServerSettings",
    "create_app",
    "default_model_name",
    "serve",
    "served_model_files",
]
