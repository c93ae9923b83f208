"""An install builds only what it uses: without an extra's dependency, everything that does not
need it works, and asking for what does raises ``MissingDependencyError`` naming the extra.

The processes that hide a dependency are subprocesses: a finder refuses the module (as a missing
one fails, with its name), or for llama_cpp ``sys.modules`` holds ``None`` (so that looking for
it finds nothing either), before anything of the package is imported.
"""

from __future__ import annotations

import re
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

from llamacpp_integrations.errors import LlamaCppIntegrationError, MissingDependencyError
from llamacpp_integrations.optional import EXTRAS, requires
from tests.builders.model_headers import LLAMA_8B, write_header
from tests.builders.python_json import run_python_json

ROOT = Path(__file__).resolve().parents[2]
GUIDE_CASSETTE = (
    ROOT
    / "tests/cassettes/unit/test_guide_testing"
    / "test_the_agent_calls_multiply_and_answers.llamacpp.jsonl"
)
# Installed first in each subprocess: the named modules are "not installed".
HIDE = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    class Missing(MetaPathFinder):
        def __init__(self, names):
            self.names = set(names)

        def find_spec(self, name, path, target=None):
            for hidden in self.names:
                if name == hidden or name.startswith(hidden + "."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    MISSING = Missing(())
    sys.meta_path.insert(0, MISSING)
    """
)


def _run(script: str) -> dict[str, Any]:
    return run_python_json("-c", HIDE + textwrap.dedent(script))


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_each_extra_declares_the_modules_the_package_says_it_brings() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    for extra, wanted in EXTRAS.items():
        declared = {_name(requirement) for requirement in extras[extra]}
        for package in wanted.modules.values():
            assert _name(package) in declared, (extra, package)
    # The core compiles nothing; `all` is every runtime extra and no tool for this repository.
    assert "llama-cpp-python" not in {_name(r) for r in project["dependencies"]}
    assert extras["all"] == [f"llamacpp-integrations[{','.join(EXTRAS)}]"]


def test_only_the_extras_own_modules_become_the_typed_error() -> None:
    error = ModuleNotFoundError("No module named 'llama_cpp'", name="llama_cpp")
    with pytest.raises(MissingDependencyError) as caught, requires("local"):
        raise error
    assert caught.value.extra == "local" and caught.value.package == "llama-cpp-python"
    assert caught.value.name == "llama_cpp" and caught.value.__cause__ is error
    assert "pip install 'llamacpp-integrations[local]'" in str(caught.value)
    assert isinstance(caught.value, ModuleNotFoundError | LlamaCppIntegrationError)
    # A package path: the missing parent is the extra's too.
    with pytest.raises(MissingDependencyError, match="llama-index-core"), requires("llama-index"):
        raise ModuleNotFoundError("No module named 'llama_index'", name="llama_index")
    # A dependency of the dependency, or a finder that names nothing: passed on as it came.
    for other in ("numpy", None):
        with pytest.raises(ModuleNotFoundError) as passed, requires("local"):
            raise ModuleNotFoundError("gone", name=other)
        assert type(passed.value) is ModuleNotFoundError


def test_without_llama_cpp_the_remote_side_and_replays_work_and_local_models_say_why(
    tmp_path: Path,
) -> None:
    model = write_header(tmp_path / "header.gguf", **LLAMA_8B)
    result = _run(
        f"""
        sys.modules["llama_cpp"] = None  # not installed: neither imported nor found
        import contextlib, io, json, os, socket
        os.environ["HF_HUB_OFFLINE"] = "1"  # an hf:// model that got past the check fails fast
        import llamacpp_integrations, llamacpp_integrations.testing
        from llamacpp_integrations import cli
        from llamacpp_integrations.langchain import ChatLlamaCpp, LlamaCppEmbeddings
        from llamacpp_integrations.llama_index import LlamaCpp, LlamaCppEmbedding
        from llamacpp_integrations.remote import RemoteEngine
        from tests.builders.without_local import error_of, local_model_errors, replay_agent

        result = replay_agent({str(GUIDE_CASSETTE)!r})
        # Adapters over a remote engine run their whole path: the refused connection is the
        # remote engine's own typed error, not a missing llama.cpp.
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            url = "http://127.0.0.1:%d" % free.getsockname()[1]
        result["remote"] = {{
            "ChatLlamaCpp": error_of(lambda: ChatLlamaCpp(base_url=url).invoke("Hi")),
            "LlamaCpp": error_of(lambda: LlamaCpp(engine=RemoteEngine(url)).complete("Hi")),
        }}
        model = {str(model)!r}
        errors = local_model_errors(model)
        errors["LlamaCpp"] = error_of(lambda: LlamaCpp(model=model).complete("Hi"))
        # Said before the model is resolved: nothing is downloaded for an engine that cannot load.
        errors["hf://"] = error_of(lambda: ChatLlamaCpp(model="hf://o/r/m.gguf").invoke("Hi"))
        errors["LlamaCppEmbeddings"] = error_of(
            lambda: LlamaCppEmbeddings(model=model).embed_query("Hi")
        )
        errors["LlamaCppEmbedding"] = error_of(
            lambda: LlamaCppEmbedding(model=model).get_text_embedding("Hi")
        )
        commands = [["serve", model], ["doctor", model]]
        commands += [[name, "--model", model] for name in ("chat", "demo")]
        for command in commands:
            stderr = io.StringIO()
            with contextlib.redirect_stderr(stderr):
                code = cli.main(command)
            errors["cli " + command[0]] = {{"code": code, "message": stderr.getvalue()}}
        result["errors"] = errors
        print(json.dumps(result))
        """
    )
    assert result["tool_calls"] == [{"name": "multiply", "args": {"a": 6, "b": 7}}]
    assert result["answer"]
    for name, error in result["remote"].items():
        assert error["type"] == "ServerUnavailableError", (name, error)
    for name, error in result["errors"].items():
        if name.startswith("cli "):
            assert error["code"] == 1, (name, error)
            assert "llamacpp-integrations[local]" in error["message"], (name, error)
        else:
            assert (error["type"], error["extra"]) == ("MissingDependencyError", "local"), name
            assert "pip install 'llamacpp-integrations[local]'" in error["message"]


# Two processes: what each hides, and each statement run there with the extra it must name.
# The first keeps langchain_core: the LangChain adapters import without httpx, uvicorn or tqdm.
MISSING_EXTRAS = {
    "httpx uvicorn llama_index tqdm": [
        ("import llamacpp_integrations.remote", "remote"),
        ("ChatLlamaCpp(base_url='http://127.0.0.1:9').invoke('Hi')", "remote"),
        ("from llamacpp_integrations.server import serve; serve()", "server"),
        ("import llamacpp_integrations.llama_index", "llama-index"),
        ("progress_bar(True, 2, 'Embedding').__enter__()", "langchain"),
    ],
    "langchain_core starlette": [
        ("import llamacpp_integrations.langchain", "langchain"),
        ("import llamacpp_integrations.server", "server"),
    ],
}


@pytest.mark.parametrize("hidden", sorted(MISSING_EXTRAS))
def test_each_extra_missing_says_which_to_install(hidden: str) -> None:
    cases = MISSING_EXTRAS[hidden]
    imports = (
        "from llamacpp_integrations.langchain import ChatLlamaCpp" if "httpx" in hidden else ""
    )
    result = _run(
        f"""
        MISSING.names.update({hidden.split()!r})
        import json
        import llamacpp_integrations.testing
        from llamacpp_integrations.client.embedding import progress_bar
        {imports}
        from tests.builders.without_local import error_of

        statements = {[statement for statement, _ in cases]!r}
        errors = [error_of(lambda: exec(s, globals())) for s in statements]
        print(json.dumps({{"errors": errors}}))
        """
    )
    for (statement, extra), error in zip(cases, result["errors"], strict=True):
        assert error is not None, statement
        assert (error["type"], error["extra"]) == ("MissingDependencyError", extra), statement
        assert f"pip install 'llamacpp-integrations[{extra}]'" in error["message"]
