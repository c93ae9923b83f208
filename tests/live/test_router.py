"""One real llama-server in router mode (no ``-m``; ``--models-dir`` holding both test models)
behind ``RemoteEngine(model=...)`` and the adapters' ``model``: each model answers requests
that name it, the router lists its models and unloads one on request, and an engine naming no
model is told which it may name.

Router mode starts one child process per model, which a build without subprocess support
(llama-cpp-python's vendored sources, as ``make llama-server`` builds them) refuses: the
release's server is used (``make llama-server-release``, or
``$LLAMACPP_INTEGRATIONS_LLAMA_SERVER_RELEASE``); skipped without a binary that can route.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamacpp_integrations.errors import InvalidRequestError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp
from llamacpp_integrations.remote import RemoteEngine
from tests.live.llama_servers import LlamaServerProcess, llama_server_binary
from tests.live.remote_servers import LLAMA_SERVER_RELEASE, short_question

BINARY = LLAMA_SERVER_RELEASE if LLAMA_SERVER_RELEASE.is_file() else llama_server_binary()
pytestmark = pytest.mark.skipif(
    BINARY is None,
    reason="no llama-server binary: run `make llama-server-release` "
    "or set LLAMACPP_INTEGRATIONS_LLAMA_SERVER_RELEASE",
)
SMOLLM = "SmolLM2-135M-Instruct.Q4_1"
GEMMA = "gemma-3-270m-q4_k_m"


@pytest.fixture(scope="module")
def router(
    smollm_path: Path, gemma_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    assert BINARY is not None
    models = tmp_path_factory.mktemp("router-models")
    for model in (smollm_path, gemma_path):
        (models / model.name).symlink_to(model.resolve())
    server = LlamaServerProcess(
        BINARY, smollm_path, slots=1, extra=("--models-dir", str(models), "--models-max", "2")
    )
    at = server.command.index("-m")
    del server.command[at : at + 2]  # a router is started over a folder, not a model
    try:
        try:
            server.start()
        except RuntimeError as error:
            if "subprocess is not enabled" in str(error):
                pytest.skip(f"{BINARY} cannot route (built without subprocess support)")
            raise
        yield server.url
    finally:
        server.close()


def test_each_model_answers_by_model(router: str) -> None:
    engines = {name: RemoteEngine(router, model=name) for name in (SMOLLM, GEMMA)}
    try:
        for name, engine in engines.items():
            caps = engine.capabilities
            assert caps.router and caps.model == name
            assert {m.id for m in caps.models} == {SMOLLM, GEMMA}
            assert engine.info.name == name  # the routed model's own /props
            assert engine.generate(short_question()).usage.completion_tokens > 0
        # Two vocabularies: the same text is different tokens, so each request reached its own.
        smollm, gemma = (engines[n].tokenize("Hello world") for n in (SMOLLM, GEMMA))
        assert smollm != gemma
        assert engines[GEMMA].info.n_ctx_per_seq > 0
    finally:
        for engine in engines.values():
            engine.close()


def test_the_adapters_model_names_the_routed_model(router: str) -> None:
    with ChatLlamaCpp(base_url=router, model=GEMMA, temperature=0.0, max_tokens=6) as chat:
        assert chat.invoke("Name a colour.").content
    with LlamaCpp(base_url=router, model=SMOLLM, temperature=0.0, max_tokens=6) as llm:
        assert llm.complete("Name a colour.").text


def test_a_model_is_unloaded_and_loads_again(router: str) -> None:
    with RemoteEngine(router, model=SMOLLM) as engine:
        engine.generate(short_question())
        engine.unload_model()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = {m.id: m.status for m in engine.models()}
            if status[SMOLLM] == "unloaded":
                break
            time.sleep(0.2)
        assert status[SMOLLM] == "unloaded"
        # loaded again on demand
        assert engine.generate(short_question()).usage.completion_tokens > 0


def test_an_engine_naming_no_model_is_told_which(router: str) -> None:
    with RemoteEngine(router) as engine, pytest.raises(InvalidRequestError) as error:
        engine.generate(short_question())
    assert SMOLLM in str(error.value) and GEMMA in str(error.value)
