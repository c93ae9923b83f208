"""One streamed chat completion from a llama-server on loopback, as the benchmarks read it."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any


def stream_chat(
    port: int, messages: list[dict[str, str]], max_tokens: int, **fields: Any
) -> Iterator[tuple[float, str]]:
    """Greedy, streamed: the arrival time and text of every chunk that carries text.
    ``fields`` go into the request body as they are (``ignore_eos=True``...)."""
    body = json.dumps(
        {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            **fields,
        }
    )
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    try:
        connection.request(
            "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(
                f"llama-server answered {response.status}: {response.read()[:300]!r}"
            )
        for raw in response:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            text = choices[0].get("delta", {}).get("content") or ""
            if text:
                yield time.perf_counter(), text
    finally:
        connection.close()
