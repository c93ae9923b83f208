"""``RemoteEngine`` over a stand-in llama-server (httpx's mock transport) answering the
``/props`` bodies recorded from live servers: a router's model named in every request, API keys
(missing or wrong: a typed error saying which), a base URL behind a proxy's path, and a feature
the server lacks (``ServerFeatureError`` naming it and the build)."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llamacpp_integrations.engine import ChatMessage, ChatRequest, CompletionRequest
from llamacpp_integrations.errors import (
    InvalidRequestError,
    ServerAuthenticationError,
    ServerFeatureError,
    ServerUnavailableError,
)
from llamacpp_integrations.remote import FleetEngine, RemoteEngine, RouterModel
from llamacpp_integrations.remote.transport import Transport

RECORDED = Path(__file__).parent / "remote_props"
VENDORED = json.loads((RECORDED / "vendored_props.json").read_text())
MODELS = json.loads((RECORDED / "vendored_models.json").read_text())
ROUTER = json.loads((RECORDED / "release_router_props.json").read_text())
ROUTER_MODELS = json.loads((RECORDED / "release_router_models.json").read_text())
FINAL = {"content": "ok", "tokens": [1], "stop": True, "stop_type": "eos", "timings": {}}


class Server:
    """Answers like llama-server; ``router``: like one over ``ROUTER_MODELS``. Records every
    request; ``key``: the API key it wants; ``prefix``: the path a proxy serves it under."""

    def __init__(self, *, router: bool = False, key: str | None = None, prefix: str = "") -> None:
        self.router = router
        self.key = key
        self.prefix = prefix
        self.props = copy.deepcopy(VENDORED)
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if self.key is not None and request.headers.get("authorization") != f"Bearer {self.key}":
            error = {"message": "Invalid API Key", "type": "authentication_error", "code": 401}
            return httpx.Response(401, json={"error": error})
        assert request.url.path.startswith(self.prefix + "/")
        path = request.url.path[len(self.prefix) :]
        body = json.loads(request.content) if request.content else {}
        model = request.url.params.get("model") or body.get("model")
        if path == "/props":
            return httpx.Response(200, json=ROUTER if self.router and not model else self.props)
        if path in ("/models", "/v1/models"):
            return httpx.Response(200, json=ROUTER_MODELS if self.router else MODELS)
        if path == "/tokenize":
            return httpx.Response(200, json={"tokens": [1, 2]})
        if path == "/completion":
            return httpx.Response(200, text=f"data: {json.dumps(FINAL)}\n\n")
        if path in ("/models/load", "/models/unload"):
            return httpx.Response(200, json={"success": True})
        if path == "/embeddings":
            message = "This server does not support embeddings. Start it with `--embeddings`"
            error = {"code": 501, "message": message, "type": "not_supported_error"}
            return httpx.Response(501, json={"error": error})
        return httpx.Response(404, json={"error": {"message": "File Not Found"}})

    def paths(self) -> list[str]:
        return [r.url.path for r in self.seen]


@pytest.fixture
def mocked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Server]]:
    """Each ``Transport`` built after this talks to the last server appended."""
    servers: list[Server] = []

    def client(self: Transport) -> httpx.Client:
        mock = httpx.MockTransport(servers[-1])
        return httpx.Client(base_url=self.url, headers=self._headers, transport=mock)

    monkeypatch.setattr(Transport, "client", client)
    yield servers


def chat(**kwargs: Any) -> ChatRequest:
    return ChatRequest(messages=[ChatMessage(role="user", content="hi")], max_tokens=4, **kwargs)


ROUTED = sorted(m["id"] for m in ROUTER_MODELS["data"])


def test_a_router_gets_the_model_in_every_request(mocked: list[Server]) -> None:
    server = Server(router=True)
    mocked.append(server)
    with RemoteEngine("http://router.test", model=ROUTED[0]) as engine:
        assert engine.generate(chat()).text == "ok"
        caps = engine.capabilities
        assert caps.router and caps.model == ROUTED[0] and caps.build == ROUTER["build_info"]
        assert [m.id for m in caps.models] == [m["id"] for m in ROUTER_MODELS["data"]]
        engine.tokenize("hi")
        engine.stats()
        routed = list(server.seen)
        engine.load_model(ROUTED[1])
        engine.unload_model()
    assert [(r.url.path, r.url.params.get("model")) for r in routed[:3]] == [
        ("/props", None),
        ("/models", None),
        ("/props", ROUTED[0]),
    ]  # the router's own answers, then the routed model's
    assert {"/completion", "/tokenize", "/slots"} <= {r.url.path for r in routed}
    for request in routed[2:]:
        if request.method == "GET":
            assert request.url.params["model"] == ROUTED[0], request.url.path
        else:
            assert json.loads(request.content)["model"] == ROUTED[0], request.url.path
    loads = [json.loads(r.content) for r in server.seen if r.url.path.startswith("/models/")]
    assert loads == [{"model": ROUTED[1]}, {"model": ROUTED[0]}]


def test_a_router_needs_a_model_it_serves(mocked: list[Server]) -> None:
    mocked.append(Server(router=True))
    with RemoteEngine("http://router.test") as engine:
        with pytest.raises(InvalidRequestError, match="router over several models") as error:
            engine.generate(chat())
        assert all(name in str(error.value) for name in ROUTED)
    unknown = pytest.raises(InvalidRequestError, match="serves no model 'nope'")
    with RemoteEngine("http://router.test", model="nope") as engine, unknown:
        engine.generate(chat())


def test_router_models_are_listed(mocked: list[Server]) -> None:
    mocked.append(Server(router=True))
    with RemoteEngine("http://router.test", model=ROUTED[0]) as engine:
        models = engine.models()
    assert all(isinstance(m, RouterModel) and m.status for m in models)
    assert sorted(m.id for m in models) == ROUTED


def test_load_and_unload_need_a_router(mocked: list[Server]) -> None:
    mocked.append(Server())
    refused = pytest.raises(ServerFeatureError, match="router mode")
    with RemoteEngine("http://one.test") as engine, refused as error:
        engine.load_model("other")
    assert error.value.build == VENDORED["build_info"]


def test_an_engine_naming_no_model_still_loads_and_unloads(mocked: list[Server]) -> None:
    server = Server(router=True)
    mocked.append(server)
    with RemoteEngine("http://router.test") as engine:
        engine.load_model(ROUTED[1])
        assert json.loads(server.seen[-1].content) == {"model": ROUTED[1]}
        with pytest.raises(InvalidRequestError, match="needs a model name"):
            engine.unload_model()


def test_a_single_server_ignores_the_model_it_is_sent(mocked: list[Server]) -> None:
    server = Server()
    mocked.append(server)
    with RemoteEngine("http://one.test", model="whatever") as engine:
        assert engine.generate(chat()).text == "ok"
        assert not engine.capabilities.router and engine.capabilities.model == "whatever"


@pytest.mark.parametrize(
    ("given", "says"),
    [(None, "none was given"), ("wrong", "refused the API key given")],
)
def test_a_key_missing_or_wrong_is_an_authentication_error(
    mocked: list[Server], given: str | None, says: str
) -> None:
    mocked.append(Server(key="s3cret"))
    refused = pytest.raises(ServerAuthenticationError, match=says)
    with RemoteEngine("http://keyed.test", api_key=given) as engine, refused as error:
        engine.generate(chat())
    assert isinstance(error.value, ServerUnavailableError) and not error.value.retryable


def test_the_right_key_is_sent_as_a_bearer_token(mocked: list[Server]) -> None:
    server = Server(key="s3cret")
    mocked.append(server)
    with RemoteEngine("http://keyed.test", api_key="s3cret") as engine:
        assert engine.generate(chat()).text == "ok"
    assert {r.headers["authorization"] for r in server.seen} == {"Bearer s3cret"}


def test_a_base_url_with_a_path_keeps_it(mocked: list[Server]) -> None:
    server = Server(prefix="/llm/v2")
    mocked.append(server)
    with RemoteEngine("http://proxy.test/llm/v2/", model="m") as engine:
        assert engine.generate(chat()).text == "ok"
        assert engine.health() is False  # the stand-in has no /health: asked under the prefix
    assert all(path.startswith("/llm/v2/") for path in server.paths())
    assert "/llm/v2/completion" in server.paths()


def test_embeddings_not_enabled_name_the_feature_and_build(mocked: list[Server]) -> None:
    mocked.append(Server())
    refused = pytest.raises(ServerFeatureError, match="--embeddings")
    with RemoteEngine("http://one.test") as engine, refused as error:
        engine.embed(["a"])
    build = VENDORED["build_info"]
    assert error.value.feature.startswith("embeddings")
    assert error.value.build == build and build in str(error.value)


def test_logprobs_need_a_server_that_reports_them(mocked: list[Server]) -> None:
    server = Server()
    del server.props["default_generation_settings"]["params"]["post_sampling_probs"]
    mocked.append(server)
    with RemoteEngine("http://one.test") as engine:
        assert engine.generate(CompletionRequest(prompt="hi", max_tokens=2)).text == "ok"
        with pytest.raises(ServerFeatureError, match="logprobs"):
            engine.generate(CompletionRequest(prompt="hi", max_tokens=2, logprobs=1))
    assert server.paths().count("/completion") == 1


def test_stats_ask_only_the_endpoints_the_server_has(mocked: list[Server]) -> None:
    server = Server()
    server.props["endpoint_slots"] = False
    mocked.append(server)
    with RemoteEngine("http://one.test") as engine:
        stats = engine.stats()
    assert stats.slots == () and "/slots" not in server.paths() and "/metrics" not in server.paths()


def test_an_unknown_build_is_used_with_one_line(
    mocked: list[Server], caplog: pytest.LogCaptureFixture
) -> None:
    server = Server()
    server.props["build_info"] = "b0-unknown"
    mocked.append(server)
    caplog.set_level(logging.INFO, "llamacpp_integrations.remote")
    with RemoteEngine("http://unknown-build.test") as engine:
        engine.generate(chat())
        engine.generate(chat())
    lines = [r.getMessage() for r in caplog.records if "b0-unknown" in r.getMessage()]
    assert len(lines) == 1 and "chat template" in lines[0]


def test_a_fleet_of_routers_names_the_model_to_every_member(mocked: list[Server]) -> None:
    server = Server(router=True)
    mocked.append(server)
    with FleetEngine(["http://a.test", "http://b.test"], model=ROUTED[1]) as fleet:
        assert fleet.generate(chat()).text == "ok"
    posts = [json.loads(r.content) for r in server.seen if r.method == "POST"]
    assert posts and all(body["model"] == ROUTED[1] for body in posts)


def test_a_per_call_model_is_routed_to_the_same_server(mocked: list[Server]) -> None:
    """``model=`` on one call of an adapter over a router names that model to the same server
    (never a local model of that name); the adapter's own calls keep its model."""
    from llamacpp_integrations.langchain import ChatLlamaCpp

    server = Server(router=True)
    mocked.append(server)
    llm = ChatLlamaCpp(base_url="http://router.test", model=ROUTED[0], max_tokens=4)
    try:
        assert llm.invoke("hi").content == "ok"
        assert llm.invoke("hi", model=ROUTED[1]).content == "ok"
        assert llm.invoke("hi", model=ROUTED[1]).content == "ok"
    finally:
        llm.close()
    posts = [json.loads(r.content)["model"] for r in server.seen if r.url.path == "/completion"]
    assert posts == [ROUTED[0], ROUTED[1], ROUTED[1]]


def test_allow_untested_build_is_deprecated() -> None:
    with pytest.warns(DeprecationWarning, match="no longer needed"):
        RemoteEngine("http://any.test", allow_untested_build=True).close()
