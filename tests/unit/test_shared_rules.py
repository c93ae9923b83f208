"""What the adapters and the server once each did their own way, done one way: a model's name,
its window before the engine is loaded, log-probabilities in OpenAI's shape; and the LangChain
adapter's modules import one another without a circle."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from llamacpp_integrations import client
from llamacpp_integrations.engine import ChatRequest, TokenLogprob, TopLogprob
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp, LlamaCppEmbedding
from llamacpp_integrations.llama_index.window import FRAMING_RESERVE
from llamacpp_integrations.models import read_gguf_info
from llamacpp_integrations.server import create_app, default_model_name
from llamacpp_integrations.server.openai.bodies import ResponseIds, chat_response

from .test_models import valid_gguf  # a tiny GGUF: "Tiny Test", trained on 4096
from .tiny_model import INFO, tiny_engine

PACKAGE = Path(__file__).resolve().parents[2] / "llamacpp_integrations"


def _gguf(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(valid_gguf())
    return path


# -- one name --------------------------------------------------------------------------------------


def test_one_rule_names_a_model_everywhere(tmp_path: Path) -> None:
    gguf = _gguf(tmp_path, "tiny-Q8_0.gguf")
    engine = tiny_engine(info=replace(INFO, path=str(gguf)))
    expected = client.model_display_name(gguf)
    assert expected == "tiny-Q8_0"  # the file name without .gguf, not "Tiny Test Model"
    chat = ChatLlamaCpp(engine=engine)
    assert chat.model_name == expected
    assert chat.profile is not None and chat.profile["name"] == expected
    assert LlamaCpp(engine=engine).metadata.model_name == expected
    assert LlamaCppEmbedding(engine=engine).model_name == expected
    assert default_model_name(engine) == expected
    # Before anything is loaded, from the model's spec or header, by the same rule.
    assert LlamaCpp(model=str(gguf)).metadata.model_name == expected
    assert LlamaCppEmbedding(model=str(gguf)).model_name == expected
    assert ChatLlamaCpp(model=str(gguf)).profile["name"] == expected  # type: ignore[index]


def test_the_server_lists_its_model_by_the_rule() -> None:
    from starlette.testclient import TestClient

    with TestClient(create_app(tiny_engine())) as http:
        (card,) = http.get("/v1/models").json()["data"]
    assert card["id"] == client.model_display_name(INFO.path) == "tiny-Q8_0"


# -- one window before loading ---------------------------------------------------------------------


def test_both_adapters_estimate_the_window_one_way(tmp_path: Path) -> None:
    gguf = _gguf(tmp_path, "tiny.gguf")
    header = read_gguf_info(gguf)
    for settings in ({}, {"n_ctx_per_seq": 512}, {"n_ctx_per_seq": 0}):
        chat = ChatLlamaCpp(model=str(gguf), **settings)  # type: ignore[arg-type]
        llm = LlamaCpp(model=str(gguf), **settings)  # type: ignore[arg-type]
        window = llm.binding.window(header)
        assert chat.binding.window(header) == window
        assert chat.profile is not None and chat.profile["max_input_tokens"] == window.n_ctx_per_seq
        assert llm.metadata.context_window == window.n_ctx_per_seq - FRAMING_RESERVE
        assert chat.binding.loaded() is None and llm.binding.loaded() is None


def test_the_profile_estimate_leaves_the_binding_unmade(tmp_path: Path) -> None:
    # The profile is read in the constructor: the binding (which fixes the engine settings)
    # is still made on first use only.
    chat = ChatLlamaCpp(model=str(_gguf(tmp_path, "tiny.gguf")), n_ctx_per_seq=512)
    assert chat.profile is not None and chat.profile["max_input_tokens"] == 512
    assert chat._binding is None


def test_a_loaded_engine_reports_its_own_window(tmp_path: Path) -> None:
    header = read_gguf_info(_gguf(tmp_path, "tiny.gguf"))
    llm = LlamaCpp(engine=tiny_engine())
    assert llm.binding.window(header) == client.ModelWindow(256, "tiny-Q8_0")


# -- one logprob shape -----------------------------------------------------------------------------

LOGPROBS = (
    TokenLogprob("o", 5, -0.25, (111,), (TopLogprob("o", 5, -0.25, (111,)),)),
    TokenLogprob("k", 6, -1.5, (107,)),
)
OPENAI_SHAPE = [
    {
        "token": "o",
        "logprob": -0.25,
        "bytes": [111],
        "top_logprobs": [{"token": "o", "logprob": -0.25, "bytes": [111]}],
    },
    {"token": "k", "logprob": -1.5, "bytes": [107], "top_logprobs": []},
]


def test_langchain_and_the_server_write_logprobs_one_way() -> None:
    assert client.openai_logprobs(LOGPROBS) == OPENAI_SHAPE
    engine = tiny_engine(logprobs=LOGPROBS)
    chat = ChatLlamaCpp(engine=engine, logprobs=True)
    whole = chat.invoke("hi").response_metadata["logprobs"]["content"]
    streamed = [
        c
        for chunk in chat.stream("hi")
        for c in chunk.response_metadata.get("logprobs", {}).get("content", [])
    ]
    request = engine.requests[0]
    assert isinstance(request, ChatRequest)
    result = client.CallPlan(request).read(engine.generate(request))
    served = chat_response(ResponseIds("chatcmpl", "x", "m"), result, logprobs=True)
    assert whole == streamed == served["choices"][0]["logprobs"]["content"] == OPENAI_SHAPE


# -- no import circle ------------------------------------------------------------------------------


def _imported_siblings(path: Path) -> set[str]:
    """The modules of ``path``'s folder that it imports (``from .x import ...``), anywhere in
    the file, ``TYPE_CHECKING`` blocks included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is not None:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def test_adapter_modules_import_each_other_without_a_circle() -> None:
    for folder in ("langchain", "llama_index", "server", "client"):
        modules = {p.stem: p for p in (PACKAGE / folder).glob("*.py") if p.stem != "__init__"}
        graph = {name: _imported_siblings(path) & set(modules) for name, path in modules.items()}

        def reaches(start: str, goal: str, seen: set[str], graph: dict[str, set[str]]) -> bool:
            for nxt in graph[start] - seen:
                if nxt == goal or reaches(nxt, goal, seen | {nxt}, graph):
                    return True
            return False

        circles = [name for name in graph if reaches(name, name, set(), graph)]
        assert circles == [], f"{folder}: {circles}"
    assert "chat_model" not in _imported_siblings(PACKAGE / "langchain" / "structured_output.py")
