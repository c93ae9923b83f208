"""``llamacpp-integrations serve --ray``: the command's model, engine settings and app options
as a Serve application on a Ray cluster (``serve_app``), run until interrupted."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..engine.config import EngineConfig
from ..errors import InvalidRequestError, ModelLoadError
from .serve_app import run_on_ray, serve_application
from .serve_options import ServeOptions

__all__ = ["serve_on_ray"]


def serve_on_ray(
    args: argparse.Namespace, engine: EngineConfig, app_options: Mapping[str, Any]
) -> int:
    """Serve ``engine``'s model with ``app_options`` on the cluster the ``--ray-*`` flags name.

    One model only: every replica loads it (from the same path on every node), so several
    models or models loaded on demand (``--keep-alive``, a folder) are refused.
    """
    several = len(args.models) > 1 or any(Path(m).expanduser().is_dir() for m in args.models)
    if several or args.keep_alive is not None or args.models_max is not None:
        raise InvalidRequestError(
            "--ray serves one model, loaded by every replica (no folders, --keep-alive or "
            "--models-max)"
        )
    autoscaling = None
    if args.ray_max_replicas is not None:
        autoscaling = {
            "min_replicas": args.ray_min_replicas,
            "initial_replicas": max(
                args.ray_min_replicas, min(args.ray_replicas, args.ray_max_replicas)
            ),
            "max_replicas": args.ray_max_replicas,
        }
    options = ServeOptions(
        replicas=args.ray_replicas,
        autoscaling=autoscaling,
        num_cpus=args.ray_cpus,
        num_gpus=args.ray_gpus,
        graceful_shutdown_timeout_s=float(args.grace_period),
    )
    app = serve_application(engine, options=options, app_options=app_options)
    where = f"http://{args.host}:{args.port}/v1"
    count = f"{args.ray_min_replicas}-{args.ray_max_replicas}" if autoscaling else args.ray_replicas
    print(f"serving {engine.model} on Ray Serve at {where}, {count} replica(s)", file=sys.stderr)
    try:
        run_on_ray(app, host=args.host, port=args.port, address=args.ray_address)
    except RuntimeError as error:  # Serve's "Deploying application ... failed"
        raise ModelLoadError(
            engine.model or "",
            f"the replicas did not start on Ray Serve ({error}); "
            "`serve status` and the replicas' logs say why",
        ) from error
    return 0
