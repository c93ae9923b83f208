"""Past one machine on Ray: batch jobs with Ray Data, a Ray Serve deployment, and ``RayEngine``.

Needs the ``ray`` extra (``pip install 'llamacpp-integrations[ray]'``).
"""

from __future__ import annotations

from .engine_service import EngineService

__all__: list[str] = ["EngineService"]
