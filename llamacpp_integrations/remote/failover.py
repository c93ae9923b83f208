"""A fleet call's way over its servers, apart from the I/O: which server is next, what a failure
means for the call and for the server, and the error once no server is left.

``FleetEngine`` sends, awaits and iterates; these decide. A call tries each server at most once,
and its driver reads the same, sync or async::

    probe(way.revival())                 # when no server is healthy: those due a probe
    for url in way.servers():
        with way.attempt(url):           # a failure another server may retry is swallowed
            return call(members[url])
    raise way.exhausted()

* ``AnyServer``: a call that is not generation (tokens, templates, model info, embeddings) goes
  to the first healthy server; a failure that server is to blame for (a retryable
  ``ServerUnavailableError`` naming it) ejects it, and the next one tries.
* ``RoutedRequest``: generation goes where the router picks by the request's affinity key, and
  counts in that server's load while it runs. A retryable failure before the first chunk
  reached the caller goes to another server; once a chunk was delivered the error is the
  caller's (the text already shown cannot be taken back). The server is ejected either way,
  except for an error no other server would fix (a refused API key: the same key goes
  everywhere), which ends the request and ejects nobody.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from ..engine.results import StreamChunk, Usage
from ..errors import ServerUnavailableError
from .routing import Router

__all__ = ["AnyServer", "Delivery", "RoutedRequest"]


class _Way:
    """What both ways share: the router, the servers already tried, the end."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self._tried: set[str] = set()

    def revival(self) -> list[str]:
        """The servers to probe before the call starts: when no server is healthy, those due
        a probe (ejected ones whose cooldown is over); else none."""
        return [] if self._router.healthy() else self._router.due_probes()

    def exhausted(self) -> ServerUnavailableError:
        """The error once no server is left to try."""
        router = self._router
        states = ", ".join(f"{s.url} ({s.status}: {s.last_error})" for s in router.states())
        what = "every server failed this request" if self._tried else "no server is healthy"
        return ServerUnavailableError(
            f"{what}: {states}", url=",".join(router.urls), retryable=True
        )


class AnyServer(_Way):
    """A call any healthy server can take: the first one, then the next when it fails."""

    def servers(self) -> Iterator[str]:
        """The first healthy server not tried yet, each time; ends when none is left."""
        while healthy := [url for url in self._router.healthy() if url not in self._tried]:
            yield healthy[0]

    @contextlib.contextmanager
    def attempt(self, url: str) -> Iterator[None]:
        """Try ``url``: a failure it is to blame for ejects it and is swallowed, so that the
        next server tries; any other error is the caller's."""
        try:
            yield
        except ServerUnavailableError as error:
            if error.url.rstrip("/") != url or not error.retryable:
                raise  # about another server (the embeddings one, say), or final
            self._router.eject(url, str(error))
            self._tried.add(url)


class RoutedRequest(_Way):
    """A generation request with affinity ``key``; ``check_open`` raises once the fleet is
    closed (checked before every pick)."""

    def __init__(self, router: Router, key: str | None, check_open: Callable[[], None]) -> None:
        super().__init__(router)
        self._key = key
        self._check_open = check_open

    def servers(self) -> Iterator[str]:
        """The server the router picks, among those not tried yet, each time, counted as
        running the request from then on; ends when none is left."""
        while True:
            self._check_open()
            url = self._router.pick(self._key, exclude=self._tried)
            if url is None:
                return
            self._router.start(url)
            yield url

    @contextlib.contextmanager
    def attempt(self, url: str) -> Iterator[Delivery]:
        """Try ``url`` (a with-block around reading its stream): a failure another server may
        retry is swallowed, so the request's way goes on; the router learns how the try
        ended either way."""
        delivery = Delivery()
        try:
            yield delivery
        except ServerUnavailableError as error:
            if not self._retry_elsewhere(url, error, delivered=delivery.delivered):
                raise
            self._tried.add(url)
        except BaseException:  # the caller left (GeneratorExit), a typed request error...
            self._router.finish(url)
            raise
        else:
            self._finished(url, delivery.usage)

    def _retry_elsewhere(self, url: str, error: ServerUnavailableError, *, delivered: bool) -> bool:
        """Record ``url``'s failure; True when the request may go to another server."""
        # A server that broke off a stream, or could not take a request another may take, is
        # ejected. An error before any output that no other server would fix ends the request
        # but ejects nobody.
        if delivered or error.retryable:
            self._router.fail(url, str(error))
        else:
            self._router.finish(url)
        return not delivered and error.retryable

    def _finished(self, url: str, usage: Usage | None) -> None:
        if usage is None:
            self._router.finish(url)
        else:
            self._router.finish(
                url,
                prompt_tokens=usage.prompt_tokens,
                cached_prompt_tokens=usage.cached_prompt_tokens,
            )


class Delivery:
    """What of one server's answer reached the caller: whether anything did, and its usage."""

    def __init__(self) -> None:
        self.delivered = False
        self.usage: Usage | None = None

    def passed(self, chunk: StreamChunk) -> StreamChunk:
        """``chunk``, counted as delivered to the caller (its usage kept for the end)."""
        self.usage = chunk.usage or self.usage
        self.delivered = True
        return chunk
