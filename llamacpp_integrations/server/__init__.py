"""An OpenAI-compatible HTTP server over any ``InferenceEngine`` (``llamacpp-integrations serve``).

* ``create_app``: the ASGI app (Starlette): chat and legacy completions (streamed as SSE),
  embeddings, models, health and Prometheus metrics, with OpenAI-shaped errors;
* ``serve``: run it with uvicorn, with a graceful shutdown;
* ``OnDemandRoster``: several models in one server, each loaded on its first request and
  unloaded after ``keep_alive`` idle seconds (``served_model_files``: the models of paths and
  folders, named by their files).

One package per API family, each turning its bodies into the client core's call options in one
place (its ``options``) and its answers into its own shapes:

* ``openai/``: chat and legacy completions, embeddings, models, and llama-server's extras
  (``/tokenize``, ``/detokenize``, ``/apply-template``, ``/v1/rerank``);
* ``anthropic/``: the Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``);
* ``responses_api/``: OpenAI's Responses API (``POST /v1/responses``).

No family imports another. Beside them, the plumbing they share: ``app`` (putting them
together), ``settings`` (``ServerSettings``, and the one way a chat call is planned),
``exchange`` (the body, the leased models, failures in a family's shape, streams), ``roster``
and ``on_demand`` (which engine answers a request's ``model``), ``model_files``,
``chat_messages`` (OpenAI-style messages to the template's, read by chat completions and the
Responses API), ``reasoning_effort`` (OpenAI's efforts, shared by both of its APIs),
``streaming`` (SSE and client disconnects), ``errors`` (typed errors to statuses),
``security`` (API key, body limit), ``metrics`` (Prometheus) and ``run`` (uvicorn).

Needs the ``server`` extra (``pip install 'llamacpp-integrations[server]'``).
"""

from __future__ import annotations

from ..optional import requires

with requires("server"):
    from .app import DEFAULT_MAX_BODY_BYTES, create_app, default_model_name
    from .errors import ERROR_TABLE, ApiError, ErrorRow
    from .model_files import served_model_files
    from .on_demand import DEFAULT_KEEP_ALIVE, OnDemandRoster
    from .run import serve
    from .settings import ServerSettings

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
