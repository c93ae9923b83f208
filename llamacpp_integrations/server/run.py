"""Serving the app with uvicorn, with a graceful shutdown.

Before it serves, what the process made so far is frozen out of the garbage collector's passes
(``gc.freeze``): a full pass over the frameworks' modules would hold up every request.

On SIGINT or SIGTERM uvicorn stops accepting connections and waits up to ``grace_period``
seconds for in-flight requests to finish; then it cancels the rest, which cancels their engine
requests (their sequences are freed at the next step), and the engine is closed.
"""

from __future__ import annotations

import gc
from typing import Any

from ..engine import InferenceEngine
from ..optional import requires
from .app import create_app
from .roster import ModelRoster

__all__ = ["serve"]


def serve(
    engine: InferenceEngine | None = None,
    *,
    roster: ModelRoster | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    grace_period: int = 10,
    log_level: str = "info",
    **app_options: Any,
) -> None:
    """Serve ``engine``, or the models of ``roster``, until interrupted (see ``create_app``
    for ``app_options``); the engine, or the roster's models, are closed when the server
    stops."""
    with requires("server"):  # imported here: building the app (create_app) needs no uvicorn
        import uvicorn

    app = create_app(engine, roster=roster, close_engine=True, **app_options)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=grace_period,
        # One loop, one engine per model: more workers would load the weights once per process.
        workers=1,
    )
    _freeze_what_lives_as_long_as_the_server()
    uvicorn.Server(config).run()


def _freeze_what_lives_as_long_as_the_server() -> None:
    """Leave what exists now (the frameworks' modules, the app, loaded models) out of every
    later pass of the cyclic garbage collector. A full pass visits every object and holds the
    GIL throughout, so every request waits for it: about 0.1 s with LangChain and LlamaIndex
    imported, on a small machine. The server owns this process from here on; objects that
    live as long as it gain nothing from being visited again."""
    gc.collect()
    gc.freeze()
