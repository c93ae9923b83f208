"""The server's shutdown (in-flight requests finish within the grace period, or are cancelled
and their sequences freed) and its image policy (data URIs read, URLs refused by default)."""

from __future__ import annotations

import base64
import io
import json
import threading
from pathlib import Path

import httpx
from PIL import Image

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine.engine import Engine
from tests.integration.helpers import wait_for
from tests.integration.serve_helpers import running_server, start_server


def _no_eos(engine: Engine) -> dict[str, int]:
    (eos,) = engine.tokenize("<|im_end|>", parse_special=True)
    return {str(eos): -100}


def _stream_in_thread(url: str, body: dict[str, object]) -> tuple[threading.Thread, list[str]]:
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        try:
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as r:
                for line in r.iter_lines():
                    if line:  # events are separated by blank lines
                        lines.append(line)
                    started.set()
        except httpx.HTTPError as error:
            lines.append(f"closed: {type(error).__name__}")
        finally:
            started.set()

    thread = threading.Thread(target=read)
    thread.start()
    started.wait(60)
    return thread, lines


def test_shutdown_lets_a_stream_finish_within_the_grace_period(engine: Engine) -> None:
    url, server, thread = start_server(engine, grace_period=60)
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 48}
    body |= {"logit_bias": _no_eos(engine), "stream": True}
    reader, lines = _stream_in_thread(url, body)
    server.should_exit = True  # stop accepting; the stream has 60 s to end by itself
    reader.join(120)
    thread.join(120)
    assert lines[-1] == "data: [DONE]"
    finishes = [
        json.loads(line[6:])["choices"][0]["finish_reason"]
        for line in lines
        if line.startswith("data: {")
    ]
    assert finishes[-1] == "length"
    assert engine.stats().running == 0


def test_shutdown_past_the_grace_period_cancels_and_frees(engine: Engine) -> None:
    url, server, thread = start_server(engine, grace_period=1)
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 900}
    body |= {"logit_bias": _no_eos(engine), "stream": True}
    reader, lines = _stream_in_thread(url, body)
    assert engine.stats().running == 1
    server.should_exit = True
    reader.join(120)
    thread.join(120)
    assert lines[-1] != "data: [DONE]"  # cut off, not finished
    assert wait_for(engine, lambda s: s.running == 0).running == 0


def _data_uri() -> str:
    image = Image.new("RGB", (32, 32), (200, 30, 30))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def test_images_follow_the_policy(smollm_path: Path, projector: Path) -> None:
    config = EngineConfig(
        model=str(smollm_path), mmproj=str(projector), n_seq_max=2, n_ctx_per_seq=1024
    )
    with Engine(config) as vision, running_server(vision) as url:

        def ask(image_url: str) -> httpx.Response:
            content = [
                {"type": "image_url", "image_url": {"url": image_url}},
                {"type": "text", "text": "What is this?"},
            ]
            body = {"model": "m", "messages": [{"role": "user", "content": content}]}
            return httpx.post(
                f"{url}/v1/chat/completions", json=body | {"max_tokens": 4}, timeout=120
            )

        answer = ask(_data_uri())
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["prompt_tokens"] > 20  # the image's embeddings count
        refused = ask("http://127.0.0.1:9/cat.png")
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "image_load_failed:remote-disabled"
