"""The remote engine's embedding requests without a server: one ``/embeddings`` request at a
time whatever the number of callers, each caller's vectors in the order of its texts, and a
clear error for texts still queued when the engine closes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest

from llamacpp_integrations.errors import ContextOverflowError, EngineClosedError
from llamacpp_integrations.remote.embeddings import RemoteEmbeddings
from llamacpp_integrations.remote.transport import Transport


class FakeServer:
    """Answers /props, /tokenize and /embeddings like llama-server; a text's vector is its
    first token id, so a mixed-up answer shows."""

    def __init__(self, slots: int = 4, delay: float = 0.002) -> None:
        self.slots = slots
        self.delay = delay
        self.in_flight = 0
        self.most_in_flight = 0
        self.embedded = 0
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()

    def get_json(self, path: str) -> Any:
        assert path == "/props"
        return {
            "build_info": "b1-test",
            "total_slots": self.slots,
            "bos_token": "<s>",
            "default_generation_settings": {"n_ctx": 64},
        }

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        return [1] if text == "<s>" else [int(word) for word in text.split()]

    async def atokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        return self.tokenize(text, add_special=add_special, parse_special=parse_special)

    def post_json(self, path: str, body: Mapping[str, Any], **_: Any) -> Any:
        assert path == "/embeddings"
        self.gate.wait(30)
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(self.delay)
        with self._lock:
            self.in_flight -= 1
            self.embedded += 1
        return [{"index": 0, "embedding": [[float(body["content"][0]), 0.0]]}]


def _embeddings(server: FakeServer) -> RemoteEmbeddings:
    transport = cast(Transport, server)
    return RemoteEmbeddings(transport, "http://embeddings.test", allow_untested_build=True)


def _texts(first: int, n: int) -> list[str]:
    return [f"{first + i} 7 7" for i in range(n)]


def test_callers_on_threads_and_tasks_take_turns_one_request_at_a_time() -> None:
    server = FakeServer()
    embeddings = _embeddings(server)

    def by_thread(first: int) -> list[list[float]]:
        return embeddings.embed(_texts(first, 5), normalize=False, truncate=False, timeout=None)

    async def by_tasks() -> list[list[list[float]]]:
        calls = (
            embeddings.aembed(_texts(first, 5), normalize=False, truncate=False, timeout=None)
            for first in (100, 200, 300)
        )
        return list(await asyncio.gather(*calls))

    with ThreadPoolExecutor(max_workers=3) as pool:
        threaded = pool.map(by_thread, (400, 500, 600))
        gathered = asyncio.run(by_tasks())
        threaded_results = list(threaded)
    for first, vectors in zip(
        (100, 200, 300, 400, 500, 600), [*gathered, *threaded_results], strict=True
    ):
        assert [v[0] for v in vectors] == [float(first + i) for i in range(5)]
    assert server.embedded == 30
    assert server.most_in_flight == 1


def test_a_text_over_the_limit_is_refused_before_anything_is_sent() -> None:
    server = FakeServer()
    embeddings = _embeddings(server)
    with pytest.raises(ContextOverflowError, match="text 1"):
        embeddings.embed(
            ["1 2", " ".join(["3"] * 65)], normalize=True, truncate=False, timeout=None
        )
    assert server.embedded == 0
    vectors = embeddings.embed(
        ["1 2", " ".join(["3"] * 65)], normalize=True, truncate=True, timeout=None
    )
    assert [v[0] for v in vectors] == [1.0, 3.0]


def test_closing_fails_the_texts_still_queued(caplog: pytest.LogCaptureFixture) -> None:
    server = FakeServer()
    server.gate.clear()  # the first request hangs until the gate opens
    embeddings = _embeddings(server)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            embeddings.embed(_texts(10, 3), normalize=False, truncate=False, timeout=None)
        except BaseException as error:  # the test looks at what it was
            errors.append(error)

    callers = [threading.Thread(target=call) for _ in range(2)]
    for caller in callers:
        caller.start()
    time.sleep(0.2)  # both callers have a text queued behind the hung one
    embeddings.close()
    server.gate.set()
    for caller in callers:
        caller.join(30)
    assert len(errors) == 2 and all(isinstance(e, EngineClosedError) for e in errors)
    with pytest.raises(EngineClosedError):
        embeddings.embed(["1"], normalize=False, truncate=False, timeout=None)
    assert "start the server with -np 1" in caplog.text
