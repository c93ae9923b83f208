"""A throwaway HTTP server on 127.0.0.1 for tests of URL inputs (images, clips): it records
the paths it was asked for, so a test can tell that a refused URL was never fetched."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["LoopbackServer", "serving"]


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True
    hits: list[str]  # request paths, in the order they came

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[LoopbackServer]:
    """``handler`` served on a free loopback port until the block ends."""
    httpd = LoopbackServer(("127.0.0.1", 0), handler)
    httpd.hits = []
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
