"""One server, several real models (SmolLM2 and Gemma 3), each loaded on its first request and
unloaded when idle: answers under each model's own name, the listing, 404 for an unknown name,
the gatekeepers on every model, a stream never unloaded under it, memory given back after the
keep-alive, and ``serve`` over a folder of models with ``--keep-alive``.

Gemma's GGUF has no chat template: it is asked through the legacy ``/v1/completions``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from llamacpp_integrations.cli import build_parser, main, serve_config
from llamacpp_integrations.client import model_display_name
from llamacpp_integrations.engine import EngineConfig, live_engines
from llamacpp_integrations.engine.engine import Engine
from llamacpp_integrations.server import OnDemandRoster
from tests.integration.serve_helpers import running_server
from tests.live.llama_servers import free_port

ROOT = Path(__file__).resolve().parents[2]
# Small serving settings of their own, so no other test's engine is the one loaded here.
SMALL = EngineConfig(n_seq_max=2, n_ctx_per_seq=512, realign_when_idle=False)


def _wait_until(predicate: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Poll ``predicate`` (a bound on waiting, not a timing check)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _chat(model: str, **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "Hi"}], **fields}


def _complete(model: str, **fields: Any) -> dict[str, Any]:
    return {"model": model, "prompt": "The capital of France is", "max_tokens": 4, **fields}


@pytest.fixture
def names(smollm_path: Path, gemma_path: Path) -> tuple[str, str]:
    return model_display_name(smollm_path), model_display_name(gemma_path)


def test_each_model_answers_under_its_own_name_behind_the_same_gatekeepers(
    smollm_path: Path, gemma_path: Path, names: tuple[str, str]
) -> None:
    smol, gemma = names
    models = {smol: str(smollm_path), gemma: str(gemma_path)}
    roster = OnDemandRoster(models, config=SMALL)
    key = {"Authorization": "Bearer sesame"}
    with running_server(None, roster=roster, api_key="sesame", max_body_bytes=4096) as url:
        with httpx.Client(base_url=url, headers=key, timeout=120) as client:
            listed = client.get("/v1/models").json()["data"]
            assert [(m["id"], m["status"]["value"]) for m in listed] == [
                (smol, "unloaded"),
                (gemma, "unloaded"),
            ]
            chat = client.post("/v1/chat/completions", json=_chat(smol, max_tokens=4))
            assert chat.status_code == 200, chat.text
            assert chat.json()["model"] == smol
            completion = client.post("/v1/completions", json=_complete(gemma))
            assert completion.status_code == 200, completion.text
            assert completion.json()["model"] == gemma and completion.json()["choices"][0]["text"]
            listed = client.get("/v1/models").json()["data"]
            assert [m["status"]["value"] for m in listed] == ["loaded", "loaded"]
            assert [m["meta"]["n_ctx_per_seq"] for m in listed] == [512, 512]
            unknown = client.post("/v1/completions", json=_complete("gpt-4o"))
            assert unknown.status_code == 404
            assert unknown.json()["error"]["code"] == "model_not_found"
            assert client.get("/v1/models/gpt-4o").status_code == 404
            nameless = client.post("/v1/completions", json=_complete(gemma) | {"model": None})
            assert nameless.status_code == 400 and nameless.json()["error"]["param"] == "model"
            big = client.post("/v1/completions", json=_complete(gemma, prompt="x " * 4000))
            assert big.status_code == 413
            assert client.get("/health").json() == {"status": "ok"}
        # The key guards every model's endpoints.
        refused = httpx.post(f"{url}/v1/completions", json=_complete(gemma), timeout=60)
        assert refused.status_code == 401
        engines = [roster.engine(smol), roster.engine(gemma)]  # kept after their answers
    assert all(engine is not None and engine.closed for engine in engines)  # stopped: unloaded


@dataclass
class Reader:
    """A stream read on a thread until it ends or ``leave`` is set (then the client leaves)."""

    lines: list[str] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    leave: threading.Event = field(default_factory=threading.Event)

    def read(self, url: str, body: dict[str, Any]) -> None:
        try:
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as r:
                for line in r.iter_lines():
                    if line:
                        self.lines.append(line)
                        self.started.set()
                    if self.leave.is_set():
                        break
        finally:
            self.started.set()


def test_keep_alive_zero_unloads_when_the_last_answer_ends_and_never_under_a_stream(
    smollm_path: Path, gemma_path: Path, names: tuple[str, str], engine: Engine
) -> None:
    smol, gemma = names
    roster = OnDemandRoster(
        {smol: str(smollm_path), gemma: str(gemma_path)}, config=SMALL, keep_alive=0
    )
    # SmolLM2 may not end the stream early: it runs far longer than the checks beside it.
    no_end = {str(t): -100 for t in engine.tokenize("<|im_end|><|endoftext|>", parse_special=True)}
    body = _chat(smol, max_tokens=400, stream=True, logit_bias=no_end)
    with running_server(None, roster=roster) as url:
        reader = Reader()
        thread = threading.Thread(target=reader.read, args=(url, body))
        thread.start()
        assert reader.started.wait(120) and reader.lines
        (streaming,) = roster.loaded()
        model = streaming.engine
        # A whole answer beside the stream shares its engine; its end unloads nothing.
        whole = httpx.post(
            f"{url}/v1/chat/completions", json=_chat(smol, max_tokens=2), timeout=120
        )
        assert whole.status_code == 200, whole.text
        assert not model.closed and roster.status(smol) == "loaded"
        assert all("choices" in json.loads(line[6:]) for line in list(reader.lines))  # no error
        # The stream ends (its client leaves): that was the last use, the model is unloaded.
        reader.leave.set()
        thread.join(120)
        assert _wait_until(lambda: model.closed)
        assert roster.status(smol) == "unloaded" and model not in live_engines()
        # Loaded again when asked for; a stream read to its end unloads it too.
        short = Reader()
        short.read(url, _chat(smol, max_tokens=3, stream=True))
        assert short.lines[-1] == "data: [DONE]"
        assert _wait_until(lambda: roster.status(smol) == "unloaded")
        assert roster.status(gemma) == "unloaded"  # never asked for, never loaded


# ---- the command line ----------------------------------------------------------------------


def test_serve_parses_several_models_and_keep_alive() -> None:
    args = build_parser().parse_args(
        ["serve", "a.gguf", "./models", "--keep-alive", "1.5", "--slots", "3", "--models-max", "2"]
    )
    assert args.models == ["a.gguf", "./models"] and args.keep_alive == 1.5
    assert args.models_max == 2
    assert serve_config(args).n_seq_max == 3  # every model's settings
    one = build_parser().parse_args(["serve", "m.gguf"])
    assert one.keep_alive is None and serve_config(one).model == "m.gguf"
    assert one.models_max is None


def test_serve_refuses_what_it_cannot_serve(
    smollm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    for folder in ("one", "two"):
        (tmp_path / folder / "same.gguf").symlink_to(smollm_path)
    assert main(["serve", str(tmp_path / "one"), str(tmp_path / "two")]) == 1
    assert "another model is served as 'same'" in capsys.readouterr().err
    both = [str(tmp_path / "one" / "same.gguf"), str(smollm_path)]
    assert main(["serve", *both, "--mmproj", "auto"]) == 1
    assert "serve that model on its own" in capsys.readouterr().err


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _mappings(pid: int, path: Path) -> int:
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
        return sum(1 for line in maps if line.rstrip().endswith(str(path)))


@dataclass(frozen=True)
class Served:
    """A ``serve`` process: its base URL and its pid."""

    url: str
    pid: int


@pytest.fixture
def served_folder(smollm_path: Path, gemma_path: Path, tmp_path: Path) -> Iterator[Served]:
    """``serve`` over a folder of both models (and a projector, which is not a model) with a
    keep-alive of 1 s, in a process of its own, stopped (by Ctrl-C) after the test."""
    folder = tmp_path / "models"
    folder.mkdir()
    for path in (smollm_path, gemma_path):
        (folder / path.name).symlink_to(path)
    (folder / "mmproj-model-f16.gguf").write_bytes(b"GGUF")
    port = free_port()
    command = [sys.executable, "-m", "llamacpp_integrations.cli", "serve", str(folder)]
    command += ["--port", str(port), "--keep-alive", "1", "--slots", "1", "--ctx", "512"]
    command += ["--no-idle-realign", "--log-level", "warning"]
    log = tmp_path / "serve.log"  # a file, not a pipe: a full pipe would stall the server
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=ROOT, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            assert server.poll() is None, log.read_text()[-3000:]
            try:
                return httpx.get(f"{url}/health", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        assert _wait_until(up), "serve did not start"
        yield Served(url, server.pid)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
        err = log.read_text()
        # 130 as after Ctrl-C; 0 where SIGINT is ignored (uvicorn re-raises it after stopping).
        assert server.returncode in (0, 130) and "Traceback" not in err, err[-3000:]


def test_serve_a_folder_loads_on_demand_and_gives_memory_back_after_the_keep_alive(
    served_folder: Served, gemma_path: Path, names: tuple[str, str]
) -> None:
    smol, gemma = names
    url, pid = served_folder.url, served_folder.pid

    def status() -> dict[str, str]:
        listed = httpx.get(f"{url}/v1/models", timeout=60).json()["data"]
        return {m["id"]: m["status"]["value"] for m in listed}

    def ask(model: str) -> httpx.Response:
        return httpx.post(f"{url}/v1/completions", json=_complete(model), timeout=120)

    assert status() == {smol: "unloaded", gemma: "unloaded"}  # the projector is no model
    assert ask(smol).status_code == 200
    # SmolLM2 goes after 1 s idle; the memory after it (llama.cpp imported) is the baseline.
    assert _wait_until(lambda: status()[smol] == "unloaded")
    before = _rss(pid)
    answer = ask(gemma)
    assert answer.status_code == 200 and answer.json()["model"] == gemma
    loaded = _rss(pid)
    weights = gemma_path.resolve()
    assert _mappings(pid, weights) > 0
    assert _wait_until(lambda: status()[gemma] == "unloaded")
    # "unloaded" is listed once the engine takes no more requests; its worker frees the
    # contexts and then the weights right after (the last thing it does), so the memory is
    # read once the weights are unmapped.
    assert _wait_until(lambda: _mappings(pid, weights) == 0)  # the weights are unmapped
    after = _rss(pid)
    grown = loaded - before
    assert grown > 0
    # Memory comes back: at most a quarter of what loading took stays (allocator caches).
    assert after - before < grown / 4, (before, loaded, after)
    assert ask(smol).status_code == 200  # loaded again after its unload
