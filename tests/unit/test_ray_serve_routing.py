"""The Ray Serve deployment's pure parts, without a cluster or a model: the affinity key of a
handle call and of each API family's body, the replicas a key prefers (the hash ring with its
load bound), the deployment options, and the HTTP relay's messages."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from llamacpp_integrations.engine.types import ChatMessage, ChatRequest, CompletionRequest
from llamacpp_integrations.errors import InvalidRequestError
from llamacpp_integrations.ray.http_relay import answer, failure_messages, read_body, route_path
from llamacpp_integrations.ray.prefix_keys import (
    AffinityRing,
    RoutedHttp,
    call_affinity_key,
    http_affinity_key,
)
from llamacpp_integrations.ray.serve_options import ServeOptions
from llamacpp_integrations.remote.affinity import affinity_key

SYSTEM = {"role": "system", "content": "You sell hardware."}


def _chat_body(system: dict[str, Any] | None, question: str, **extra: Any) -> bytes:
    messages = ([system] if system else []) + [{"role": "user", "content": question}]
    return json.dumps({"messages": messages, **extra}).encode()


# ---- keys ------------------------------------------------------------------------------------


def test_a_handle_call_is_keyed_by_its_request_or_its_routed_http() -> None:
    chat = ChatRequest(messages=[ChatMessage(role="system", content="Be brief.")])
    assert call_affinity_key([chat]) == affinity_key(chat)
    assert call_affinity_key(["ignored", CompletionRequest(prompt="Once")]) == "text:Once"
    assert call_affinity_key([RoutedHttp({}, b"", "k")]) == "k"
    assert call_affinity_key([["an", "embedding", "batch"]]) is None
    assert call_affinity_key([]) is None


def test_chat_bodies_sharing_a_system_prompt_share_a_key() -> None:
    path = "/llm/v1/chat/completions"
    one = http_affinity_key(path, _chat_body(SYSTEM, "Nails?"))
    assert one is not None
    assert http_affinity_key(path, _chat_body(SYSTEM, "Saws?")) == one
    assert http_affinity_key(path, _chat_body(None, "Nails?")) != one
    tools = [{"type": "function", "function": {"name": "stock"}}]
    assert http_affinity_key(path, _chat_body(SYSTEM, "Nails?", tools=tools)) != one


def test_each_api_family_keys_its_own_system_field() -> None:
    anthropic = {"system": "You sell hardware.", "messages": [{"role": "user", "content": "x"}]}
    key = http_affinity_key("/v1/messages", json.dumps(anthropic).encode())
    assert key == http_affinity_key(
        "/v1/messages", json.dumps({**anthropic, "max_tokens": 9}).encode()
    )
    responses = {"instructions": "You sell hardware.", "input": "Nails?"}
    assert http_affinity_key("/v1/responses", json.dumps(responses).encode()) == key
    completion = json.dumps({"prompt": "Once upon a time"}).encode()
    assert http_affinity_key("/v1/completions", completion) == "text:Once upon a time"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/embeddings", b'{"input": ["a"]}'),
        ("/v1/rerank", b'{"query": "a", "documents": ["b"]}'),
        ("/v1/chat/completions", b"not json"),
        ("/v1/chat/completions", b"[1, 2]"),
        ("/v1/chat/completions", b'{"messages": "not a list"}'),
        ("/v1/chat/completions", b'{"messages": [], "chat_template_kwargs": 3}'),
        ("/v1/completions", b'{"prompt": [1, "two"]}'),
    ],
)
def test_routes_without_a_prefix_and_unreadable_bodies_have_no_key(path: str, body: bytes) -> None:
    assert http_affinity_key(path, body) is None


# ---- the ring --------------------------------------------------------------------------------


def test_no_key_leaves_every_replica_to_the_least_loaded_choice() -> None:
    assert AffinityRing().ranks(None, ["a", "b"], {"a": 3}) == [["a", "b"]]
    assert AffinityRing().ranks("k", [], {}) == []


def test_a_key_prefers_one_replica_whatever_the_listing_order() -> None:
    replicas = ["r1", "r2", "r3"]
    owner = AffinityRing().ranks("chat:x", replicas, {})[0]
    assert AffinityRing().ranks("chat:x", list(reversed(replicas)), {})[0] == owner
    ranks = AffinityRing().ranks("chat:x", replicas, {})
    assert sorted(r for rank in ranks for r in rank) == replicas and all(len(r) == 1 for r in ranks)


def test_a_loaded_owner_spills_to_the_next_replica() -> None:
    ring = AffinityRing(load_factor=1.25)
    owner = ring.ranks("chat:x", ["a", "b"], {})[0][0]
    other = "b" if owner == "a" else "a"
    # 3 in flight, 2 replicas: at most ceil(1.25 * 4 / 2) = 3 each; the owner holds 3.
    ranks = ring.ranks("chat:x", ["a", "b"], {owner: 3, other: 0})
    assert ranks == [[other], [owner]]
    # 1 in flight: at most ceil(1.25 * 2 / 2) = 2 each; the owner has room.
    assert ring.ranks("chat:x", ["a", "b"], {owner: 1, other: 0})[0] == [owner]


def test_only_the_keys_of_a_replica_that_left_move() -> None:
    ring = AffinityRing()
    keys = [f"chat:{i}" for i in range(40)]
    before = {k: ring.ranks(k, ["a", "b", "c"], {})[0][0] for k in keys}
    after = {k: ring.ranks(k, ["a", "b"], {})[0][0] for k in keys}
    assert all(after[k] == before[k] for k in keys if before[k] != "c")
    assert {after[k] for k in keys} <= {"a", "b"}
    with pytest.raises(ValueError):
        AffinityRing(load_factor=0.5)


# ---- options ---------------------------------------------------------------------------------


def test_deployment_options_fit_continuous_batching() -> None:
    fixed = ServeOptions(replicas=3, num_cpus=2).deployment_options(n_seq_max=4)
    assert fixed["num_replicas"] == 3 and fixed["max_ongoing_requests"] == 8
    assert fixed["ray_actor_options"] == {"num_cpus": 2, "num_gpus": 0.0}
    assert fixed["graceful_shutdown_timeout_s"] == 30.0 and "autoscaling_config" not in fixed
    scaled = ServeOptions(autoscaling={"min_replicas": 1, "max_replicas": 4}).deployment_options(4)
    assert "num_replicas" not in scaled
    assert scaled["autoscaling_config"] == {
        "target_ongoing_requests": 4,
        "min_replicas": 1,
        "max_replicas": 4,
    }


def test_bad_options_are_refused_with_their_names() -> None:
    with pytest.raises(InvalidRequestError, match="replicas"):
        ServeOptions(replicas=0)
    with pytest.raises(InvalidRequestError, match="load_factor"):
        ServeOptions(load_factor=0.9)
    with pytest.raises(InvalidRequestError, match="replica_count"):
        ServeOptions.from_mapping({"replica_count": 2})
    assert ServeOptions.from_mapping({"replicas": 2}).replicas == 2


# ---- the relay -------------------------------------------------------------------------------


def test_a_dead_replica_is_answered_in_the_route_s_shape() -> None:
    whole = failure_messages("/v1/chat/completions", None, "ActorDiedError")
    assert whole[0]["status"] == 503
    assert json.loads(whole[1]["body"])["error"]["code"] == "replica_failed"
    anthropic = json.loads(failure_messages("/v1/messages", None, "x")[1]["body"])
    assert anthropic["type"] == "error"
    sse_start = {
        "type": "http.response.start",
        "headers": [(b"content-type", b"text/event-stream")],
    }
    tail = failure_messages("/v1/chat/completions", sse_start, "x")
    assert tail[0]["body"].startswith(b"data: {") and tail[0]["body"].endswith(b"[DONE]\n\n")
    assert tail[0]["more_body"] is False
    assert b"event: error" in failure_messages("/v1/messages", sse_start, "x")[0]["body"]


def test_the_body_is_read_to_one_byte_past_the_limit() -> None:
    async def run(parts: list[bytes], limit: int) -> bytes | None:
        messages = [
            {"type": "http.request", "body": p, "more_body": i < len(parts) - 1}
            for i, p in enumerate(parts)
        ]

        async def receive() -> dict[str, Any]:
            return messages.pop(0)

        return await read_body(receive, limit)

    assert asyncio.run(run([b"ab", b"cd"], 10)) == b"abcd"
    assert asyncio.run(run([b"abcdef", b"gh"], 3)) == b"abcd"

    async def gone() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    assert asyncio.run(read_body(gone, 10)) is None
    assert route_path({"path": "/llm/v1/models", "root_path": "/llm"}) == "/v1/models"


def test_answer_relays_the_app_and_cancels_it_with_the_call() -> None:
    cancelled = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body = (await receive())["body"]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body, "more_body": True})
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def run() -> list[Any]:
        call = RoutedHttp({"type": "http", "path": "/x"}, b"hello", None)
        stream = answer(app, call, [(b"x-llamacpp-replica", b"r1")])
        got = [await stream.__anext__(), await stream.__anext__()]
        await stream.aclose()  # the caller left
        return got

    start, body = asyncio.run(run())
    assert (b"x-llamacpp-replica", b"r1") in start["headers"] and body["body"] == b"hello"
    assert cancelled.is_set()


# ---- the ways in -----------------------------------------------------------------------------


def test_a_config_file_s_args_are_checked_before_anything_runs() -> None:
    from llamacpp_integrations.ray import build_app

    with pytest.raises(InvalidRequestError, match="model"):
        build_app({"engine": {"n_ctx_per_seq": 512}})
    with pytest.raises(InvalidRequestError, match="replica_count"):
        build_app({"model": "m.gguf", "serve": {"replica_count": 2}})
    with pytest.raises(InvalidRequestError, match="api_keys"):
        build_app({"model": "m.gguf", "server": {"api_keys": ["k"]}})


def test_serve_on_ray_serves_one_model(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from llamacpp_integrations.cli import main

    assert main(["serve", "--ray", str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")]) == 1
    assert "--ray serves one model" in capsys.readouterr().err
