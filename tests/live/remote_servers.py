"""llama-server processes for the remote tests: started on free loopback ports, stopped after.

The remote variant of a test runs in one of three ways (chosen in tests/conftest.py):

* live (``make test-live``, pytest ``--disable-recording``): against servers started here;
* recording (``make record-cassettes``, ``--record-mode=rewrite``): the same, with every HTTP
  exchange written to a cassette under tests/cassettes/;
* replay (the default, ``make test``): no server; the cassettes answer. Hosts are rewritten to
  ``RECORDED_URL`` / ``RECORDED_EMBEDDINGS_URL`` when recording and requests are matched on method,
  path and body, so the ports of the recording run do not matter.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from llamacpp_integrations.engine.types import ChatRequest, SamplingParams
from tests.live.llama_servers import DEFAULT_BINARY, RELEASE_BINARY, LlamaServerProcess

__all__ = [
    "LLAMA_SERVER",
    "LLAMA_SERVER_RELEASE",
    "RECORDED_EMBEDDINGS_URL",
    "RECORDED_URL",
    "build_servers",
    "llama_server",
    "rewrite_hosts",
    "short_question",
]

LLAMA_SERVER = Path(os.environ.get("LLAMACPP_INTEGRATIONS_LLAMA_SERVER", str(DEFAULT_BINARY)))
RECORDED_URL = "http://generation.llama-server.test"
RECORDED_EMBEDDINGS_URL = "http://embeddings.llama-server.test"


def rewrite_hosts(request: Any, hosts: Mapping[str, str]) -> Any:
    """A recorded request with a live server's URL (``hosts``' keys) named as the cassettes
    show it (its values), so the ports of a recording run never matter."""
    for live, recorded in hosts.items():
        if request.uri.startswith(live):
            request.uri = recorded + request.uri[len(live) :]
    return request


def short_question(text: str = "Name a colour.") -> ChatRequest:
    """A greedy question with a six-token answer: enough to show a server answered."""
    return ChatRequest(
        messages=[{"role": "user", "content": text}],
        sampling=SamplingParams(temperature=0.0),
        max_tokens=6,
    )


@contextmanager
def llama_server(
    model: Path, *, slots: int, n_ctx_per_slot: int, args: Sequence[str] = ()
) -> Iterator[str]:
    """One llama-server (one thread, seed 0) on a free loopback port; yields its URL once
    ``/health`` is ok, stops it after."""
    server = LlamaServerProcess(
        LLAMA_SERVER,
        model,
        threads=1,
        slots=slots,
        n_ctx_per_slot=n_ctx_per_slot,
        extra=("--seed", "0", *args),
    )
    try:
        yield server.start().url
    finally:
        server.close()


# ---- the builds compared (tests/integration/test_remote_builds.py) ---------------------------

LLAMA_SERVER_RELEASE = Path(
    os.environ.get("LLAMACPP_INTEGRATIONS_LLAMA_SERVER_RELEASE", str(RELEASE_BINARY))
)


@contextmanager
def build_servers(binary: Path, model: Path) -> Iterator[tuple[str, str]]:
    """A generation and an embeddings (``--embeddings``) llama-server from ``binary``, each
    with llama-server's own slots and context (one thread: the machine is shared); yields
    their URLs once both are healthy, stops them after."""
    generation = LlamaServerProcess(binary, model, threads=1, slots=None)
    embeddings = LlamaServerProcess(binary, model, threads=1, slots=None, extra=("--embeddings",))
    try:
        yield generation.start().url, embeddings.start().url
    finally:
        generation.close()
        embeddings.close()
