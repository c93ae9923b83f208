"""One real llama-server started with ``--api-key``, reached directly and through a reverse
proxy that serves it under a path (a loopback ``http.server`` in a thread, forwarding
``/llm/*``): a key missing or wrong is a ``ServerAuthenticationError`` saying which, the right
one answers, and a base URL with a path answers through the proxy (plain, streamed and by an
adapter). Needs the llama-server binary (``make llama-server``); skipped without it.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import SecretStr

from llamacpp_integrations.errors import ServerAuthenticationError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.remote import RemoteEngine
from tests.live.llama_servers import LlamaServerProcess, llama_server_binary
from tests.live.remote_servers import short_question

BINARY = llama_server_binary()
pytestmark = pytest.mark.skipif(
    BINARY is None,
    reason="no llama-server binary: run `make llama-server` "
    "or set LLAMACPP_INTEGRATIONS_LLAMA_SERVER",
)
KEY = "live-test-key"
PREFIX = "/llm"


@pytest.fixture(scope="module")
def keyed(smollm_path: Path) -> Iterator[LlamaServerProcess]:
    assert BINARY is not None
    server = LlamaServerProcess(BINARY, smollm_path, slots=2, extra=("--api-key", KEY))
    try:
        yield server.start()
    finally:
        server.close()


def _proxy_handler(port: int) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        """Forwards ``PREFIX/<path>`` to the server's ``/<path>``; 404 for anything else."""

        def _forward(self) -> None:
            if not self.path.startswith(PREFIX + "/"):
                self.send_error(404)
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            upstream = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            upstream.request(self.command, self.path[len(PREFIX) :], body or None, headers)
            answer = upstream.getresponse()
            payload = answer.read()  # a buffering proxy: the stream arrives whole, still SSE
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            upstream.close()

        do_GET = do_POST = _forward

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Forward


@pytest.fixture(scope="module")
def proxied(keyed: LlamaServerProcess) -> Iterator[str]:
    """The proxy's base URL for the server (with its path)."""
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _proxy_handler(keyed.port))
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}{PREFIX}"
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_no_key_says_one_is_needed(keyed: LlamaServerProcess) -> None:
    with RemoteEngine(keyed.url) as engine, pytest.raises(ServerAuthenticationError) as error:
        engine.generate(short_question())
    assert "none was given" in str(error.value) and not error.value.retryable


def test_a_wrong_key_is_refused(keyed: LlamaServerProcess) -> None:
    refused = pytest.raises(ServerAuthenticationError, match="refused the API key given")
    with RemoteEngine(keyed.url, api_key="wrong") as engine, refused:
        engine.generate(short_question())


def test_the_right_key_answers(keyed: LlamaServerProcess) -> None:
    with RemoteEngine(keyed.url, api_key=KEY) as engine:
        assert engine.health()
        assert engine.generate(short_question()).usage.completion_tokens > 0


def test_a_base_url_with_a_path_answers_through_the_proxy(proxied: str) -> None:
    with RemoteEngine(proxied, api_key=KEY) as engine:
        assert engine.health()
        assert engine.generate(short_question()).usage.completion_tokens > 0
        assert "".join(chunk.text for chunk in engine.stream(short_question())).strip()
    with RemoteEngine(proxied.rsplit("/", 1)[0], api_key=KEY) as no_prefix:
        assert not no_prefix.health()  # the proxy serves nothing outside its path


def test_an_adapter_over_the_proxy(proxied: str) -> None:
    with ChatLlamaCpp(
        base_url=proxied, api_key=SecretStr(KEY), temperature=0.0, max_tokens=6
    ) as llm:
        assert llm.invoke("Name a colour.").content
