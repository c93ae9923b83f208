"""Past one machine on Ray: batch jobs with Ray Data, a Ray Serve deployment, and ``RayEngine``.

Needs the ``ray`` extra (``pip install 'llamacpp-integrations[ray]'``).
"""

from __future__ import annotations

from .batch_embed import BatchEmbeddingSettings, EmbedBatches
from .batch_generate import BatchGenerationSettings, GenerateBatches
from .batch_rerank import BatchRerankSettings, RerankBatches
from .engine import RayEngine
from .engine_service import EngineService
from .prefix_router import PrefixAffinityRouter
from .serve_app import (
    LlamaCppIngress,
    LlamaCppReplica,
    build_app,
    run_on_ray,
    serve_application,
)
from .serve_options import ServeOptions

__all__: list[str] = [
    "BatchEmbeddingSettings",
    "BatchGenerationSettings",
    "BatchRerankSettings",
    "EmbedBatches",
    "EngineService",
    "GenerateBatches",
    "LlamaCppIngress",
    "LlamaCppReplica",
    "PrefixAffinityRouter",
    "RayEngine",
    "RerankBatches",
    "ServeOptions",
    "build_app",
    "run_on_ray",
    "serve_application",
]
