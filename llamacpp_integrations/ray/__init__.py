"""Past one machine on Ray: batch jobs with Ray Data, a Ray Serve deployment, and ``RayEngine``.

Needs the ``ray`` extra (``pip install 'llamacpp-integrations[ray]'``).
"""

from __future__ import annotations

__all__: list[str] = []
