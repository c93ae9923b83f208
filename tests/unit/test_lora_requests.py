"""LoRA adapters chosen per request, through every entry point, on a scripted engine: LangChain's
``bind(lora=...)``, LlamaIndex's per-call keyword, the server's ``lora`` field (llama-server's
shape, ids or names) and ``/lora-adapters``; an unknown adapter is a typed error everywhere, and a
request's adapters are part of its cassette fingerprint."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from llama_index.core.llms import ChatMessage as IndexMessage
from starlette.testclient import TestClient

from llamacpp_integrations.engine import ChatMessage, ChatRequest, LoraEngine
from llamacpp_integrations.errors import InvalidRequestError, UnknownAdapterError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp
from llamacpp_integrations.remote.lora import RemoteLoras
from llamacpp_integrations.server import create_app
from llamacpp_integrations.testing import ScriptedEngine, ScriptedLoraEngine
from llamacpp_integrations.testing.fingerprint import generation_fingerprint


def engine() -> ScriptedLoraEngine:
    return ScriptedLoraEngine(adapters=("sql", "chat"))


def test_langchain_bind_and_call_keywords_choose_adapters() -> None:
    scripted = engine()
    llm = ChatLlamaCpp(engine=scripted)
    llm.bind(lora={"sql": 1.0}).invoke("Hi")
    llm.invoke("Hi", lora={"chat": 0.5, 0: 0.25})
    llm.invoke("Hi")
    assert [r.lora for r in scripted.requests] == [{"sql": 1.0}, {"chat": 0.5, 0: 0.25}, None]
    with pytest.raises(UnknownAdapterError, match="no LoRA adapter 'legal'"):
        llm.bind(lora={"legal": 1.0}).invoke("Hi")
    with pytest.raises(InvalidRequestError, match="lora must map"):
        llm.invoke("Hi", lora=["sql"])


def test_llama_index_takes_lora_per_call() -> None:
    scripted = engine()
    llm = LlamaCpp(engine=scripted)
    llm.chat([IndexMessage(role="user", content="Hi")], lora={"chat": 1.0})
    llm.complete("Hi", lora={"sql": 0.5})
    assert [r.lora for r in scripted.requests] == [{"chat": 1.0}, {"sql": 0.5}]
    with pytest.raises(UnknownAdapterError):
        llm.complete("Hi", lora={"legal": 1.0})


def test_the_server_reads_llama_servers_lora_field_with_ids_or_names() -> None:
    scripted = engine()
    client = TestClient(create_app(scripted))
    messages = [{"role": "user", "content": "Hi"}]
    lora = [{"id": 0, "scale": 0.5}, {"id": "chat", "scale": 1.0}]
    assert client.post("/v1/chat/completions", json={"messages": messages, "lora": lora}).is_success
    assert client.post("/v1/completions", json={"prompt": "Hi", "lora": [{"id": 1}]}).is_success
    assert client.post("/v1/chat/completions", json={"messages": messages, "lora": []}).is_success
    body = {"input": "Hi", "lora": [{"id": "sql", "scale": 1.0}]}
    assert client.post("/v1/responses", json=body).is_success
    body = {"messages": messages, "max_tokens": 8, "lora": [{"id": "chat", "scale": 1.0}]}
    assert client.post("/v1/messages", json=body).is_success
    assert [r.lora for r in scripted.requests] == [
        {0: 0.5, "chat": 1.0},
        {1: 0.0},
        None,  # an empty list asks for nothing, as llama-server reads it
        {"sql": 1.0},
        {"chat": 1.0},
    ]
    unknown = client.post(
        "/v1/chat/completions", json={"messages": messages, "lora": [{"id": 7, "scale": 1.0}]}
    )
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "unknown_lora_adapter"
    bad = client.post("/v1/chat/completions", json={"messages": messages, "lora": {"sql": 1}})
    assert bad.status_code == 400


def test_lora_adapters_lists_and_scales_as_llama_server_does() -> None:
    scripted = engine()
    client = TestClient(create_app(scripted))
    assert client.get("/lora-adapters").json() == [
        {"id": 0, "path": "sql.gguf", "scale": 0.0, "name": "sql"},
        {"id": 1, "path": "chat.gguf", "scale": 0.0, "name": "chat"},
    ]
    answer = client.post("/lora-adapters", json=[{"id": 1, "scale": 0.8}])
    assert answer.json() == {"success": True}
    assert [a.scale for a in scripted.lora_adapters] == [0.0, 0.8]
    assert client.post("/lora-adapters", json=[{"id": "sql", "scale": 1}]).is_success
    assert [a.scale for a in scripted.lora_adapters] == [1.0, 0.0]
    assert client.post("/lora-adapters", json=[{"id": 9, "scale": 1}]).status_code == 400
    assert client.post("/lora-adapters", json={"id": 0}).status_code == 400
    plain = TestClient(create_app(ScriptedEngine()))
    assert plain.get("/lora-adapters").json() == []
    assert plain.post("/lora-adapters", json=[]).status_code == 400


def test_a_scripted_lora_engine_is_a_lora_engine_and_loads_adapters() -> None:
    scripted = engine()
    assert isinstance(scripted, LoraEngine) and not isinstance(ScriptedEngine(), LoraEngine)
    info = scripted.load_lora("legal", "legal.gguf")
    assert (info.id, info.name) == (2, "legal")
    with pytest.raises(InvalidRequestError, match="named 'legal' already"):
        scripted.load_lora("legal", "other.gguf")


def test_the_fingerprint_holds_the_adapters_asked_for() -> None:
    def request(**kwargs: object) -> ChatRequest:
        messages = [ChatMessage(role="user", content="Hi")]
        return ChatRequest(messages=messages, request_id="r", **kwargs)  # type: ignore[arg-type]

    plain = generation_fingerprint(request())
    assert "lora" not in plain  # cassettes recorded before requests chose adapters replay
    sql = generation_fingerprint(request(lora={"sql": 1.0}))
    assert sql["lora"] == {"sql": 1.0}
    assert sql != generation_fingerprint(request(lora={"sql": 0.5})) != plain


class _Server:
    """A llama-server's ``GET /lora-adapters``, for ``RemoteLoras``."""

    def get_json(self, path: str, routed: bool = True) -> object:
        assert path == "/lora-adapters"
        return [
            {"id": 1, "path": "/a/chat.gguf", "scale": 1.0},
            {"id": 0, "path": "/a/sql.gguf", "scale": 0.0},
        ]


def test_a_remote_request_names_adapters_by_file_or_id_in_llama_servers_shape() -> None:
    loras = RemoteLoras(_Server())  # type: ignore[arg-type]
    assert loras.field(None) == {}  # the server's own scales
    assert loras.field({"sql": 0.5}) == {"lora": [{"id": 0, "scale": 0.5}, {"id": 1, "scale": 0.0}]}
    assert loras.field({}) == {"lora": [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}]}
    assert loras.field({1: 2.0})["lora"][1] == {"id": 1, "scale": 2.0}
    with pytest.raises(UnknownAdapterError):
        loras.field({"legal": 1.0})
    assert [(a.id, a.name, a.scale) for a in loras.list()] == [(0, "sql", 0.0), (1, "chat", 1.0)]


def test_a_ray_engine_lists_its_replicas_adapters_and_refuses_to_change_one() -> None:
    pytest.importorskip("ray")
    from llamacpp_integrations.ray.engine import RayEngine
    from llamacpp_integrations.ray.engine_service import EngineService

    service = EngineService.__new__(EngineService)  # the replica's side, without Ray
    service._hold = SimpleNamespace(engine=engine(), release=lambda: None)  # type: ignore[assignment]
    assert [a.name for a in service.lora_adapters()] == ["sql", "chat"]
    ray_engine = RayEngine.__new__(RayEngine)
    with pytest.raises(InvalidRequestError, match="replicas each serve an engine"):
        ray_engine.load_lora("legal", "legal.gguf")
    with pytest.raises(InvalidRequestError, match="replicas each serve an engine"):
        ray_engine.set_lora_scales({"sql": 1.0})
