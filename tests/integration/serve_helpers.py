"""Running the OpenAI-compatible server in this process, on a free loopback port."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from llamacpp_integrations.engine import InferenceEngine
from llamacpp_integrations.server import create_app
from tests.live.llama_servers import free_port

# A function tool in the chat-completions shape, for the tests of several endpoints.
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def start_server(
    engine: InferenceEngine | None, grace_period: int = 5, **options: Any
) -> tuple[str, uvicorn.Server, threading.Thread]:
    """A server over ``engine`` (or, with ``engine`` ``None``, the ``roster=`` option's models)
    running on a thread: its base URL, the server, the thread."""
    port = free_port()
    app = create_app(engine, **options)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=grace_period,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    return f"http://127.0.0.1:{port}", server, thread


@contextmanager
def running_server(engine: InferenceEngine | None, **options: Any) -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT``) of a server over ``engine``, stopped after."""
    url, server, thread = start_server(engine, **options)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
