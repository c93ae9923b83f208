"""The Ray files the guide shows (examples/ray) are what Ray reads: the Serve config file and
the RayService's serveConfigV2 pass Serve's schema, name our builder, and their args build the
application (binding only: no cluster, no model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")
pytest.importorskip("ray")

from ray.serve import Application  # noqa: E402
from ray.serve.schema import ServeDeploySchema  # noqa: E402

from llamacpp_integrations.ray import build_app  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ray"


def _applications(config: dict[str, Any]) -> list[Any]:
    schema = ServeDeploySchema.model_validate(config)
    assert schema.applications
    return list(schema.applications)


@pytest.mark.parametrize("source", ["serve_config.yaml", "rayservice.yaml"])
def test_the_guide_s_serve_configs_build_the_app(source: str) -> None:
    config = yaml.safe_load((EXAMPLES / source).read_text())
    if config.get("kind") == "RayService":
        assert config["spec"]["rayClusterConfig"]["rayVersion"].startswith("2.")
        config = yaml.safe_load(config["spec"]["serveConfigV2"])
    for application in _applications(config):
        assert application.import_path == "llamacpp_integrations.ray.serve_app:build_app"
        assert isinstance(build_app(dict(application.args)), Application)


def test_the_cluster_sketch_is_yaml_with_a_head_and_workers() -> None:
    cluster = yaml.safe_load((EXAMPLES / "cluster.yaml").read_text())
    assert cluster["head_node_type"] in cluster["available_node_types"]
