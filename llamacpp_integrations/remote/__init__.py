"""Remote engines: llama.cpp's ``llama-server`` behind the engine interface.

``RemoteEngine`` drives one server over its native API (our prompts, grammars, logprobs,
images and embeddings), deciding each feature from what the server reports
(``ServerCapabilities``), and routes by ``model`` behind a router; ``connect`` makes the
engine a URL (or several) names, for adapters' ``base_url=``; ``FleetEngine`` routes over
several servers by prompt-prefix affinity. Needs the ``remote`` extra (httpx).
"""

from __future__ import annotations

from ..optional import requires

with requires("remote"):
    from .builds import TESTED_BUILDS
    from .capabilities import RouterModel, ServerCapabilities
    from .connect import connect
    from .engine import RemoteEngine
    from .fleet import FleetEngine, FleetStats
    from .routing import ServerState

__all__ = [
    "TESTED_BUILDS",
    "FleetEngine",
    "FleetStats",
    "RemoteEngine",
    "RouterModel",
    "ServerCapabilities",
    "ServerState",
    "connect",
]
