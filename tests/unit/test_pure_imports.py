"""Pure code imports no native code: the engine's types, configuration, scheduler and interface,
the adapter core, tools, multimodal loading and both framework adapters."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import NATIVE, only_unit_tests

ROOT = Path(__file__).resolve().parents[2]

PURE_MODULES = [
    "llamacpp_integrations",
    "llamacpp_integrations.errors",
    "llamacpp_integrations.engine",
    "llamacpp_integrations.engine.batch",
    "llamacpp_integrations.engine.channel",
    "llamacpp_integrations.engine.chat_template",
    "llamacpp_integrations.engine.config",
    "llamacpp_integrations.engine.sizing",
    "llamacpp_integrations.engine.prompt_disk_cache",
    "llamacpp_integrations.engine.speculative",
    "llamacpp_integrations.engine.embedding_queue",
    "llamacpp_integrations.engine.embedding_work",
    "llamacpp_integrations.engine.inbox",
    "llamacpp_integrations.engine.interface",
    "llamacpp_integrations.engine.logprobs",
    "llamacpp_integrations.engine.media",
    "llamacpp_integrations.engine.output",
    "llamacpp_integrations.engine.reasoning",
    "llamacpp_integrations.engine.registry",
    "llamacpp_integrations.engine.requests",
    "llamacpp_integrations.engine.scheduler",
    "llamacpp_integrations.engine.types",
    "llamacpp_integrations.client",
    "llamacpp_integrations.tools",
    "llamacpp_integrations.tools.grammar",
    "llamacpp_integrations.multimodal",
    "llamacpp_integrations.models",
    "llamacpp_integrations.langchain",
    "llamacpp_integrations.llama_index",
    "llamacpp_integrations.server",
]


def test_pure_modules_import_without_llama_cpp() -> None:
    script = textwrap.dedent(
        f"""
        import importlib, sys
        from tests.unit.conftest import NativeImportBlocker
        sys.meta_path.insert(0, NativeImportBlocker())
        for name in {PURE_MODULES!r}:
            importlib.import_module(name)
        assert {NATIVE!r} not in sys.modules
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_the_local_engine_is_the_native_part() -> None:
    # The one name that does load llama.cpp: asking for it must fail where it is blocked.
    script = textwrap.dedent(
        """
        import sys
        from tests.unit.conftest import NativeImportBlocker
        sys.meta_path.insert(0, NativeImportBlocker())
        import llamacpp_integrations.engine as engine
        try:
            engine.Engine
        except ModuleNotFoundError:
            print("blocked")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=ROOT,
    )
    assert done.stdout.strip() == "blocked", done.stderr[-3000:]


def test_this_session_guards_native_imports_when_only_unit_tests_run(
    pytestconfig: pytest.Config,
) -> None:
    if not only_unit_tests(pytestconfig.args):
        pytest.skip("mixed with tests that need llama.cpp: the guard is off in this session")
    assert NATIVE not in sys.modules
    with pytest.raises(ModuleNotFoundError, match="blocked"):
        __import__(NATIVE)
