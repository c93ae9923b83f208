"""Several models in one server, without a model: which files are served under which names,
how a request's ``model`` picks one (404, 400), and how leases load a model once, hold it while
answers use it and give it back for ``keep_alive`` (with a stand-in loader, and with the real
registry over a stand-in engine)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from llamacpp_integrations.engine import EngineConfig, registry
from llamacpp_integrations.errors import InvalidRequestError, ModelLoadError
from llamacpp_integrations.server import (
    ApiError,
    OnDemandRoster,
    create_app,
    served_model_files,
)
from llamacpp_integrations.server.roster import model_card
from llamacpp_integrations.testing import ScriptedEngine

from .tiny_model import tiny_engine

# ---- which files, under which names ------------------------------------------------------------


def _touch(folder: Path, *names: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"GGUF")


def test_a_folder_serves_its_models_and_not_projectors_or_later_split_parts(
    tmp_path: Path,
) -> None:
    models = tmp_path / "models"
    _touch(models, "b.gguf", "a.gguf", "mmproj-a-f16.gguf", "notes.txt")
    _touch(models, "big-00001-of-00002.gguf", "big-00002-of-00002.gguf")
    _touch(models / "sub", "hidden.gguf")  # subfolders are not searched
    (models / "link.gguf").symlink_to(models / "a.gguf")  # a link is served by its own name
    served = served_model_files([str(models)])
    assert list(served) == ["a", "b", "big-00001-of-00002", "link"]
    assert served["link"] == str(models.resolve() / "link.gguf")


def test_named_files_keep_their_order_and_one_file_named_twice_is_served_once(
    tmp_path: Path,
) -> None:
    _touch(tmp_path, "zeta.gguf", "alpha.gguf")
    zeta, alpha = str(tmp_path / "zeta.gguf"), str(tmp_path / "alpha.gguf")
    assert list(served_model_files([zeta, alpha, zeta])) == ["zeta", "alpha"]


def test_what_cannot_be_served_is_an_error_at_start(tmp_path: Path) -> None:
    _touch(tmp_path / "one", "same.gguf")
    _touch(tmp_path / "two", "same.gguf")
    with pytest.raises(ModelLoadError, match="another model is served as 'same'"):
        served_model_files([str(tmp_path / "one"), str(tmp_path / "two" / "same.gguf")])
    _touch(tmp_path, "mmproj-x.gguf", "m-00002-of-00003.gguf")
    with pytest.raises(ModelLoadError, match="image projector"):
        served_model_files([str(tmp_path / "mmproj-x.gguf")])
    with pytest.raises(ModelLoadError, match="part 2 of a split model"):
        served_model_files([str(tmp_path / "m-00002-of-00003.gguf")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match=r"no \.gguf model"):
        served_model_files([str(tmp_path / "empty")])
    with pytest.raises(ModelLoadError, match="not found"):
        served_model_files([str(tmp_path / "missing.gguf")])


def test_a_projector_is_refused_with_several_models() -> None:
    config = EngineConfig(mmproj="auto")
    with pytest.raises(InvalidRequestError, match="serve that model on its own"):
        OnDemandRoster({"a": "/a.gguf", "b": "/b.gguf"}, config=config)
    OnDemandRoster({"a": "/a.gguf"}, config=config)  # one model may have its projector


# ---- leases, with a stand-in loader --------------------------------------------------------------


@dataclass(eq=False)
class FakeHold:
    """What the registry's ``EngineHold`` is to the roster."""

    engine: ScriptedEngine
    releases: list[float | None] = field(default_factory=list)

    def release(self, keep_alive: float | None = None) -> None:
        self.releases.append(keep_alive)
        if keep_alive == 0:
            self.engine.close()


@dataclass
class FakeLoader:
    """Loads scripted engines (``tiny_engine``); ``gates`` hold the loads of their paths until
    set, ``fail`` makes loads fail."""

    gates: dict[str, threading.Event] = field(default_factory=dict)
    fail: BaseException | None = None
    holds: list[FakeHold] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def __call__(self, path: str) -> FakeHold:
        self.paths.append(path)
        gate = self.gates.get(path)
        if gate is not None:
            assert gate.wait(10), "the test never opened the gate"
        if self.fail is not None:
            raise self.fail
        hold = FakeHold(tiny_engine())
        self.holds.append(hold)
        return hold


def _roster(loader: FakeLoader, keep_alive: float = 300) -> OnDemandRoster:
    models = {"alpha": "/m/alpha.gguf", "beta": "/m/beta.gguf"}
    return OnDemandRoster(models, keep_alive=keep_alive, loader=loader)


async def test_requests_name_their_model() -> None:
    roster = _roster(FakeLoader())
    with pytest.raises(ApiError) as unknown:
        await roster.lease("gamma")
    assert (unknown.value.status, unknown.value.code, unknown.value.param) == (
        404,
        "model_not_found",
        "model",
    )
    assert "alpha, beta" in unknown.value.message
    with pytest.raises(ApiError) as nameless:
        await roster.lease(None)
    assert (nameless.value.status, nameless.value.param) == (400, "model")
    lease = await roster.lease("beta")
    assert lease.name == "beta"
    lease.release()
    # One model answers every name, as one engine does.
    alone = OnDemandRoster({"solo": "/m/solo.gguf"}, loader=FakeLoader())
    assert (await alone.lease("gpt-4o")).name == (await alone.lease(None)).name == "solo"


async def test_a_model_is_loaded_once_held_while_leased_and_given_back_after() -> None:
    loader = FakeLoader()
    roster = _roster(loader, keep_alive=300)
    assert roster.status("alpha") == "unloaded"
    first, second = await roster.lease("alpha"), await roster.lease("alpha")
    assert first.engine is second.engine and loader.paths == ["/m/alpha.gguf"]
    assert roster.leases("alpha") == 2 and roster.status("alpha") == "loaded"
    first.release()
    first.release()  # idempotent: counted once
    (hold,) = loader.holds
    assert roster.leases("alpha") == 1 and hold.releases == []
    second.release()
    assert hold.releases == [300]  # given back for keep_alive seconds
    assert roster.status("alpha") == "loaded"  # kept until the registry unloads it
    assert roster.engine("alpha") is hold.engine and roster.loaded() == []  # kept, not in use
    hold.engine.close()
    assert roster.status("alpha") == "unloaded"
    third = await roster.lease("alpha")  # loads again
    assert len(loader.holds) == 2 and third.engine is loader.holds[1].engine
    third.release()


async def test_an_engine_closed_under_its_leases_is_loaded_anew_for_the_next() -> None:
    loader = FakeLoader()
    roster = _roster(loader)
    first = await roster.lease("alpha")
    first.engine.close()  # e.g. its worker stopped
    second = await roster.lease("alpha")
    assert second.engine is not first.engine and not second.engine.closed
    assert loader.holds[0].releases == [0] and roster.leases("alpha") == 2
    first.release()
    second.release()
    assert loader.holds[1].releases == [300]


async def test_concurrent_first_requests_share_one_load() -> None:
    gate = threading.Event()
    loader = FakeLoader(gates={"/m/beta.gguf": gate})
    roster = _roster(loader)
    waiting = [asyncio.ensure_future(roster.lease("beta")) for _ in range(3)]
    while not loader.paths:
        await asyncio.sleep(0.001)
    assert roster.status("beta") == "loading" and roster.status("alpha") == "unloaded"
    other = await roster.lease("alpha")  # another model is served during the load
    gate.set()
    leases = await asyncio.gather(*waiting)
    assert loader.paths == ["/m/beta.gguf", "/m/alpha.gguf"]
    assert len({id(lease.engine) for lease in leases}) == 1 and roster.leases("beta") == 3
    for lease in [*leases, other]:
        lease.release()
    assert [hold.releases for hold in loader.holds] == [[300], [300]]


async def test_a_failed_load_answers_500_and_the_next_request_tries_again() -> None:
    loader = FakeLoader(fail=ModelLoadError("/m/alpha.gguf", "not a GGUF file"))
    roster = _roster(loader)
    with pytest.raises(ApiError) as failed:
        await roster.lease("alpha")
    assert (failed.value.status, failed.value.code) == (500, "model_load_failed")
    assert "not a GGUF file" in failed.value.message
    loader.fail = RuntimeError("native secrets")
    with pytest.raises(ApiError, match=r"could not be loaded: RuntimeError$"):
        await roster.lease("alpha")
    assert roster.leases("alpha") == 0 and roster.status("alpha") == "unloaded"
    loader.fail = None
    lease = await roster.lease("alpha")
    assert not lease.engine.closed
    lease.release()


async def test_a_request_that_leaves_during_the_load_gives_the_model_back_when_it_is_loaded() -> (
    None
):
    gate = threading.Event()
    loader = FakeLoader(gates={"/m/alpha.gguf": gate})
    roster = _roster(loader, keep_alive=0)
    waiting = asyncio.ensure_future(roster.lease("alpha"))
    while not loader.paths:
        await asyncio.sleep(0.001)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert roster.leases("alpha") == 0
    gate.set()
    while not loader.holds or not loader.holds[0].releases:
        await asyncio.sleep(0.001)
    assert loader.holds[0].releases == [0] and roster.status("alpha") == "unloaded"


async def test_close_gives_everything_back_and_refuses_later_requests() -> None:
    loader = FakeLoader()
    roster = _roster(loader)
    held = await roster.lease("alpha")  # a request still running at shutdown
    (await roster.lease("beta")).release()
    roster.close()
    assert loader.holds[0].releases == [0]
    held.release()  # its end gives nothing back twice
    assert loader.holds[0].releases == [0]
    with pytest.raises(ApiError) as refused:
        await roster.lease("alpha")
    assert refused.value.status == 503


async def test_models_are_listed_loaded_or_not() -> None:
    roster = _roster(FakeLoader())
    lease = await roster.lease("beta")
    alpha, beta = (model_card(card) for card in roster.cards())
    assert alpha["id"] == "alpha" and "meta" not in alpha
    assert alpha["status"] == {"value": "unloaded"}
    assert beta["status"] == {"value": "loaded"} and beta["meta"]["n_embd"] == 3
    assert [model.name for model in roster.loaded()] == ["beta"]
    lease.release()


async def test_a_cap_on_loaded_models_unloads_the_idle_one_used_longest_ago(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unloaded: list[object] = []

    def unload(engine: ScriptedEngine) -> bool:  # the registry's, for stand-in holds
        unloaded.append(engine)
        engine.close()
        return True

    monkeypatch.setattr("llamacpp_integrations.server.on_demand.unload_kept_engine", unload)
    models = {name: f"/m/{name}.gguf" for name in ("alpha", "beta", "gamma")}
    loader = FakeLoader()
    roster = OnDemandRoster(models, keep_alive=300, loader=loader, max_loaded=2)
    (await roster.lease("alpha")).release()
    (await roster.lease("beta")).release()
    (await roster.lease("alpha")).release()  # beta is now the one used longest ago
    (await roster.lease("gamma")).release()
    assert unloaded == [loader.holds[1].engine]
    assert [roster.status(name) for name in models] == ["loaded", "unloaded", "loaded"]
    # Every loaded model answering: a third cannot load without cutting one short.
    busy = [await roster.lease("alpha"), await roster.lease("gamma")]
    with pytest.raises(ApiError) as refused:
        await roster.lease("beta")
    assert (refused.value.status, refused.value.code) == (503, "models_busy")
    assert ("Retry-After", "1") in refused.value.headers
    assert roster.leases("beta") == 0 and roster.status("beta") == "unloaded"
    busy[0].release()
    (await roster.lease("beta")).release()  # alpha was idle: it made room
    assert [roster.status(name) for name in models] == ["unloaded", "loaded", "loaded"]
    busy[1].release()
    with pytest.raises(InvalidRequestError, match="max_loaded"):
        OnDemandRoster(models, loader=loader, max_loaded=0)


# ---- with the real registry ------------------------------------------------------------------


@pytest.fixture
def opened() -> dict[ScriptedEngine, EngineConfig]:
    """The engines the registry opened, each with the settings it was opened with."""
    return {}


@pytest.fixture
def registry_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: dict[ScriptedEngine, EngineConfig]
) -> Iterator[dict[str, str]]:
    def open_engine(config: EngineConfig) -> ScriptedEngine:  # instead of llama.cpp
        engine = tiny_engine()
        opened[engine] = config
        return engine

    monkeypatch.setattr(registry, "open_local_engine", open_engine)
    _touch(tmp_path, "alpha.gguf", "beta.gguf")
    yield served_model_files([str(tmp_path)])
    registry.unload_kept_engines()


def _live(opened: dict[ScriptedEngine, EngineConfig]) -> list[object]:
    """The registry's live engines that this test opened (others' tests may leave theirs)."""
    return [engine for engine in registry.live_engines() if engine in opened]


async def test_keep_alive_zero_unloads_when_the_last_answer_ends(
    registry_models: dict[str, str], opened: dict[ScriptedEngine, EngineConfig]
) -> None:
    roster = OnDemandRoster(registry_models, config=EngineConfig(n_seq_max=2), keep_alive=0)
    first, second = await roster.lease("alpha"), await roster.lease("alpha")
    engine = first.engine
    assert isinstance(engine, ScriptedEngine)
    config = opened[engine]
    assert config.n_seq_max == 2  # the settings apply to every model
    assert config.model == registry_models["alpha"]
    first.release()
    assert not engine.closed  # an answer still uses it
    second.release()
    assert engine.closed and engine not in registry.live_engines()


async def test_a_kept_model_is_taken_again_and_unloaded_by_close(
    registry_models: dict[str, str], opened: dict[ScriptedEngine, EngineConfig]
) -> None:
    roster = OnDemandRoster(registry_models, keep_alive=-1)
    lease = await roster.lease("beta")
    engine = lease.engine
    lease.release()
    assert not engine.closed and engine in registry.live_engines()
    again = await roster.lease("beta")
    assert again.engine is engine  # kept: nothing loaded again
    again.release()
    roster.close()
    assert engine.closed and _live(opened) == []


async def test_keep_alive_expires(registry_models: dict[str, str]) -> None:
    roster = OnDemandRoster(registry_models, keep_alive=0.05)
    lease = await roster.lease("alpha")
    lease.release()
    for _ in range(2000):  # a bound on waiting, not a timing check
        if lease.engine.closed:
            break
        await asyncio.sleep(0.005)
    assert lease.engine.closed and roster.status("alpha") == "unloaded"


# ---- the server over the roster, with the real registry -----------------------------------------


def test_the_app_routes_by_model_and_guards_every_endpoint(
    registry_models: dict[str, str], opened: dict[ScriptedEngine, EngineConfig]
) -> None:
    app = create_app(roster=OnDemandRoster(registry_models), api_key="sesame")
    key = {"Authorization": "Bearer sesame"}
    with TestClient(app) as client:
        assert client.get("/v1/models").status_code == 401
        assert client.get("/health").json() == {"status": "ok"}
        listed = client.get("/v1/models", headers=key).json()["data"]
        assert [m["id"] for m in listed] == ["alpha", "beta"]
        assert client.get("/v1/models/gamma", headers=key).status_code == 404
        body = {"model": "beta", "prompt": "Hi", "max_tokens": 2}
        answer = client.post("/v1/completions", json=body, headers=key)
        assert answer.status_code == 200 and answer.json()["model"] == "beta"
        streamed = client.post("/v1/completions", json=body | {"stream": True}, headers=key)
        assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
        unknown = client.post("/v1/completions", json=body | {"model": "gamma"}, headers=key)
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "model_not_found"
        nameless = client.post("/v1/embeddings", json={"input": "x"}, headers=key)
        assert nameless.status_code == 400 and nameless.json()["error"]["param"] == "model"
        assert client.get("/v1/models/beta", headers=key).json()["status"]["value"] == "loaded"
        (engine,) = _live(opened)  # one load for both answers, kept after them
    assert engine.closed  # unloaded when the app stopped
    with pytest.raises(TypeError, match="engine or a roster"):
        create_app()
