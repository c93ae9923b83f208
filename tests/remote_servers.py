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
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
LLAMA_SERVER = Path(
    os.environ.get(
        "LLAMACPP_INTEGRATIONS_LLAMA_SERVER",
        str(ROOT / ".cache" / "llama-server" / "build" / "bin" / "llama-server"),
    )
)
RECORDED_URL = "http://generation.llama-server.test"
RECORDED_EMBEDDINGS_URL = "http://embeddings.llama-server.test"
STARTUP_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def llama_server(model: Path, args: Sequence[str] = ()) -> Iterator[str]:
    """One llama-server on a free loopback port; yields its URL once ``/health`` is ok."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        str(LLAMA_SERVER),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        "1",
        "--no-webui",
        "--seed",
        "0",
        *args,
    ]
    # The server logs every request: into a file, since a pipe nobody reads fills up and then
    # blocks the server mid-request.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait_healthy(url, process, log)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not _healthy(url):
        if process.poll() is not None:
            log.seek(0)
            error = log.read().decode(errors="replace")
            raise RuntimeError(f"llama-server exited ({process.returncode}): {error[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"llama-server at {url} was not healthy in time")
        time.sleep(0.1)
