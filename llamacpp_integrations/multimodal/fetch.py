"""Fetching an image over http(s) so that the URL cannot reach what it should not.

Every hop, the first URL and each redirect alike: the URL must be ``http`` or ``https`` without
credentials; its host is resolved once with ``socket.getaddrinfo`` and refused if any address it
resolves to is not allowed (``targets``); the connection then goes to a vetted address
itself, so no second lookup can answer differently (DNS rebinding), while the original name is
sent in ``Host`` and, for https, used as SNI and as the name the certificate must match.

One watchdog holds the whole fetch, redirects included, to the policy's timeout: when it expires
it shuts the socket down, so a server dripping a byte at a time cannot hold a thread. The body is
cut off at ``max_bytes`` whatever ``Content-Length`` says (a larger declared length is refused
before reading). Proxy settings from the environment are ignored on purpose: through a proxy,
the address check would vet the proxy, not the server.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from types import TracebackType
from urllib.parse import urljoin

from ..errors import ImageLoadError
from .policy import ImagePolicy
from .targets import SockAddr, Target, parse_target, resolve, shown

__all__ = ["FetchedImage", "fetch_url"]

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024
_USER_AGENT = "llamacpp-integrations"


@dataclass(frozen=True)
class FetchedImage:
    """A downloaded body that passed the transport checks (not yet decoded)."""

    data: bytes
    content_type: str
    url: str  # the last URL, after redirects


def _open_socket(family: int, sockaddr: SockAddr, timeout: float) -> socket.socket:
    """Connect a TCP socket to exactly ``sockaddr`` (a seam the tests watch)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


@lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """The system trust store, hostname checking on (a seam the tests replace)."""
    return ssl.create_default_context()


class _Watchdog:
    """Shuts the watched socket down once the deadline passes, waking any read blocked on it."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.expired = False
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._timer.cancel()

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0 or self.expired:
            raise TimeoutError
        return left

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            expired = self.expired
        if expired:
            self._shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            sock = self._sock
        if sock is not None:
            self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        # The plain socket's shutdown, also for a TLS socket: it wakes a blocked read without
        # touching the TLS object another thread may be using.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _PinnedConnection(http.client.HTTPConnection):
    """HTTP(S) to addresses vetted beforehand; ``host`` is only the name sent and verified."""

    def __init__(
        self, target: Target, addresses: list[tuple[int, SockAddr]], watchdog: _Watchdog
    ) -> None:
        super().__init__(target.host, target.port, timeout=watchdog.remaining())
        if target.tls:
            self.default_port = 443  # so that Host carries no ":443"
        self._target = target
        self._addresses = addresses
        self._watchdog = watchdog

    def connect(self) -> None:
        sys.audit("http.client.connect", self, self.host, self.port)
        failure: OSError | None = None
        sock: socket.socket | None = None
        for family, sockaddr in self._addresses:
            try:
                sock = _open_socket(family, sockaddr, self._watchdog.remaining())
                break
            except TimeoutError:
                raise
            except OSError as exc:
                failure = exc
        if sock is None:
            raise failure or OSError("no address to connect to")
        self._watchdog.watch(sock)
        sock.settimeout(self._watchdog.remaining())
        if self._target.tls:
            tls_sock = _tls_context().wrap_socket(
                sock, server_hostname=self._target.host, do_handshake_on_connect=False
            )
            self._watchdog.watch(tls_sock)
            tls_sock.do_handshake()
            sock = tls_sock
        self.sock = sock


def fetch_url(url: str, policy: ImagePolicy) -> FetchedImage:
    """Download the image at ``url`` under ``policy`` (which must allow remote images)."""
    if not policy.allow_remote:
        raise ImageLoadError(
            f"URL {shown(url)!r}: remote images are disabled (ImagePolicy.allow_remote)",
            reason="remote-disabled",
        )
    with _Watchdog(time.monotonic() + policy.timeout_s) as watchdog:
        for _hop in range(policy.max_redirects + 1):
            target = parse_target(url)
            addresses = resolve(target, policy)
            result = _get(target, addresses, policy, watchdog)
            if isinstance(result, FetchedImage):
                return result
            url = result
    raise ImageLoadError(
        f"more than {policy.max_redirects} redirects (the last to {shown(url)!r})",
        reason="too-many-redirects",
    )


def _get(
    target: Target,
    addresses: list[tuple[int, SockAddr]],
    policy: ImagePolicy,
    watchdog: _Watchdog,
) -> FetchedImage | str:
    """One GET: the image, or the absolute URL a redirect points to."""
    conn: _PinnedConnection | None = None
    try:
        conn = _PinnedConnection(target, addresses, watchdog)
        conn.connect()
        conn.putrequest("GET", target.path, skip_accept_encoding=True)
        conn.putheader("Accept", ", ".join(policy.allowed_content_types))
        conn.putheader("Accept-Encoding", "identity")
        conn.putheader("User-Agent", _USER_AGENT)
        conn.putheader("Connection", "close")
        conn.endheaders()
        response = conn.getresponse()
        if response.status in _REDIRECT_STATUSES:
            location = response.getheader("Location")
            if not location:
                raise ImageLoadError(
                    f"{shown(target.url)!r}: redirect {response.status} without a Location",
                    reason="fetch-failed",
                )
            return urljoin(target.url, location.strip())
        if not 200 <= response.status < 300:
            raise ImageLoadError(
                f"{shown(target.url)!r}: HTTP {response.status} {response.reason}",
                reason="fetch-failed",
            )
        content_type = (response.getheader("Content-Type") or "").split(";", 1)[0].strip().lower()
        if content_type not in policy.allowed_content_types:
            raise ImageLoadError(
                f"{shown(target.url)!r} is served as {content_type or 'no Content-Type'!r}; "
                f"allowed are {', '.join(policy.allowed_content_types)}",
                reason="bad-content-type",
            )
        declared = _content_length(response.getheader("Content-Length"))
        if declared is not None and declared > policy.max_bytes:
            raise ImageLoadError(
                f"{shown(target.url)!r} declares {declared} bytes, over the "
                f"{policy.max_bytes}-byte limit",
                reason="too-large",
            )
        body = _read_capped(response, policy.max_bytes, target)
        watchdog.remaining()  # a body cut short by the watchdog ends like a normal one
        return FetchedImage(body, content_type, target.url)
    except ImageLoadError:
        raise
    except TimeoutError as exc:
        raise _timeout(target, policy) from exc
    except ssl.SSLCertVerificationError as exc:
        raise ImageLoadError(
            f"{shown(target.url)!r}: TLS certificate not valid for {target.host!r} "
            f"({getattr(exc, 'verify_message', None) or exc})",
            reason="fetch-failed",
        ) from exc
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if watchdog.expired:
            raise _timeout(target, policy) from exc
        raise ImageLoadError(
            f"{shown(target.url)!r}: {type(exc).__name__}: {exc}", reason="fetch-failed"
        ) from exc
    finally:
        if conn is not None:
            conn.close()


def _timeout(target: Target, policy: ImagePolicy) -> ImageLoadError:
    return ImageLoadError(
        f"{shown(target.url)!r}: no complete answer within {policy.timeout_s} s",
        reason="timeout",
    )


def _content_length(header: str | None) -> int | None:
    if header is None:
        return None
    try:
        return int(header.split(",", 1)[0].strip())
    except ValueError:
        return None


def _read_capped(response: http.client.HTTPResponse, max_bytes: int, target: Target) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while chunk := response.read1(_CHUNK):
        total += len(chunk)
        if total > max_bytes:
            raise ImageLoadError(
                f"{shown(target.url)!r}: the body passed the {max_bytes}-byte limit",
                reason="too-large",
            )
        chunks.append(chunk)
    return b"".join(chunks)
