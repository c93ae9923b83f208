"""``PrefixAffinityRouter``: Ray Serve's request router for the llama.cpp replicas.

Serve runs one router per caller of a deployment (each HTTP proxy, each handle's owner); it
calls ``choose_replicas`` with the pending call and tries the ranks it returns in order, taking
the least loaded replica with room in the first rank that has one (Serve's own queue-length
cache and probes, and its backoff when every replica is full). The ranks come from
``prefix_keys.AffinityRing``: a call's key to its owner on the ring, then the next replicas
clockwise, replicas at the load bound last; a call without a key to the least loaded replica.

Why not Ray's ``PrefixCacheAffinityRouter`` (``ray.serve.llm.request_router``): it reads
``.messages`` or ``.prompt`` off the call's arguments and fails on any other call (the engine
interface's ``embed``, ``tokenize``...), keys on the concatenated message texts without roles,
tools or template, and asks a detached prefix-tree actor with a blocking ``ray.get`` for every
request, from the router's event loop. A hash ring needs no shared state: every router
computes the same owner.
"""

from __future__ import annotations

from typing import Any

from ..optional import requires
from .prefix_keys import DEFAULT_LOAD_FACTOR, AffinityRing, call_affinity_key

with requires("ray"):
    from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

__all__ = ["PrefixAffinityRouter"]


class PrefixAffinityRouter(RequestRouter):
    """Routes calls sharing a prompt prefix to one replica, the rest to the least loaded.

    Name it in a deployment's ``request_router_config``
    (``RequestRouterConfig(request_router_class=PrefixAffinityRouter,
    request_router_kwargs={"load_factor": 1.25})``); ``serve_app`` does.
    """

    def initialize_state(self, load_factor: float = DEFAULT_LOAD_FACTOR, **kwargs: Any) -> None:
        """Serve's hook for ``request_router_kwargs``.

        Args:
            load_factor: How far above the average load a replica may go before a key it owns
                spills over to the next replica (``>= 1``; 1.25 by default, as the fleet's).
        """
        del kwargs
        self._ring = AffinityRing(load_factor)

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        """The candidates in ranks, most wanted first (see the module's docstring)."""
        if not candidate_replicas:
            return []
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        args = pending_request.args if pending_request is not None else ()
        loads = {}
        for replica_id, replica in by_id.items():
            queue_len = self.replica_queue_len_cache.get(replica.replica_id)
            loads[replica_id] = queue_len or 0
        ranks = self._ring.ranks(call_affinity_key(args or ()), list(by_id), loads)
        return [[by_id[replica_id] for replica_id in rank] for rank in ranks]
