"""Which replica a call prefers: the affinity key of a call, and the replicas in the order it
wants them. Pure: no Ray, no model.

A replica's prompt cache keeps hitting when requests sharing a prompt prefix keep landing on it.
The key is ``remote.affinity.affinity_key``, the one the llama-server fleet routes by (a chat's
leading system messages, tools and template; a raw prompt's first characters), so the two ways
out of one machine group requests alike:

* a call through a deployment handle (``RayEngine``) carries its ``GenerationRequest``: the key
  is that request's;
* an HTTP request reaches a replica as a ``RoutedHttp`` the ingress built after reading the
  body, keyed from the body of each API family (``http_affinity_key``): Serve's HTTP proxy hands
  its router the request's headers only, so the prompt is read one hop earlier.

The replicas are placed on ``remote.routing.HashRing`` (by their Serve ids), so every router (one
per proxy and per handle owner) agrees on a key's owner without sharing any state. The bound on
load is the fleet's: no replica takes more than ``ceil(load_factor * (in_flight + 1) / n)``
requests before a key spills to the next replica on the ring, and a call without a key goes to
the least loaded replica.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..engine.types import ChatRequest, CompletionRequest, GenerationRequest
from ..remote.affinity import affinity_key
from ..remote.routing import HashRing

__all__ = ["AffinityRing", "RoutedHttp", "call_affinity_key", "http_affinity_key"]

DEFAULT_LOAD_FACTOR = 1.25


@dataclass(frozen=True)
class RoutedHttp:
    """One HTTP request, read by the ingress, for a replica's ``handle_http``.

    Attributes:
        scope: The ASGI scope's plain fields (method, path, headers...).
        body: The whole request body (the ingress stops reading one byte past the app's limit,
            so the replica's own body limit still answers 413).
        affinity_key: The key the router places it by (``None``: least loaded).
    """

    scope: dict[str, Any]
    body: bytes
    affinity_key: str | None


def call_affinity_key(args: Sequence[Any]) -> str | None:
    """The key of a handle call with positional ``args``: a ``RoutedHttp``'s, or the key of
    the first ``GenerationRequest`` among them (``None``: embeddings, tokens, no request)."""
    for arg in args:
        if isinstance(arg, RoutedHttp):
            return arg.affinity_key
        if isinstance(arg, GenerationRequest):
            return affinity_key(arg)
    return None


def http_affinity_key(path: str, body: bytes) -> str | None:
    """The key of an HTTP request to ``path`` with JSON ``body``: the system prompt, tools and
    template variables of a chat (OpenAI chat completions, Anthropic messages, the Responses
    API's instructions), the start of a completion's prompt. ``None`` for other routes and for
    a body this cannot read (the replica answers that one with its 400)."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    try:
        request = _keyed_request(path.rstrip("/"), data)
        return None if request is None else affinity_key(request)
    except (TypeError, ValueError):  # a field of the wrong type: the replica says which
        return None


def _keyed_request(path: str, data: dict[str, Any]) -> GenerationRequest | None:
    """What of the body the key is made of, as the request the fleet would key."""
    tools = data.get("tools") or None
    if path.endswith("/chat/completions"):
        messages = data.get("messages")
        if not isinstance(messages, list):
            return None
        kwargs = data.get("chat_template_kwargs") or {}
        return ChatRequest(messages=messages, tools=tools, template_kwargs=dict(kwargs))
    if path.endswith("/v1/messages"):  # Anthropic: the system prompt is a field of its own
        system = data.get("system")
        leading = [{"role": "system", "content": system}] if system else []
        return ChatRequest(messages=leading, tools=tools)
    if path.endswith("/v1/responses"):
        instructions = data.get("instructions")
        leading = [{"role": "system", "content": instructions}] if instructions else []
        items = data.get("input")
        if isinstance(items, list):
            leading += [i for i in items if isinstance(i, dict)]  # the key stops at a user turn
        return ChatRequest(messages=leading, tools=tools)
    if path.endswith("/completions"):
        prompt = data.get("prompt")
        if isinstance(prompt, str) or (
            isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)
        ):
            return CompletionRequest(prompt=prompt)
    return None


class AffinityRing:
    """The replicas a key prefers, by consistent hashing with bounded load.

    Args:
        load_factor: How far above the average load one replica may go before a key it owns
            spills over to the next replica on the ring (``>= 1``).
    """

    def __init__(self, load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        if not load_factor >= 1.0:
            raise ValueError("load_factor must be >= 1")
        self.load_factor = load_factor
        self._ring = HashRing(())

    def ranks(
        self, key: str | None, replicas: Sequence[str], loads: Mapping[str, int]
    ) -> list[list[str]]:
        """``replicas`` in ranks, most wanted first (a router takes the least loaded replica
        of the first rank with room). A key: its owner and then the next ones clockwise, one
        per rank, those at the load bound left to a last rank. No key: one rank of all."""
        if not replicas:
            return []
        if key is None:
            return [list(replicas)]
        self._place(replicas)
        total = sum(loads.get(r, 0) for r in replicas)
        capacity = math.ceil(self.load_factor * (total + 1) / len(replicas))
        wanted = set(replicas)
        walk = [r for r in self._ring.walk(key) if r in wanted]
        ranks = [[r] for r in walk if loads.get(r, 0) < capacity]
        full = [r for r in walk if loads.get(r, 0) >= capacity]
        return [*ranks, full] if full else ranks

    def _place(self, replicas: Sequence[str]) -> None:
        """Rebuild the ring when the replicas changed: only the keys of a replica that came or
        went move (sorted, so the ring is the same whatever order the router lists them in)."""
        if set(self._ring.servers) != set(replicas):
            self._ring = HashRing(sorted(set(replicas)))
