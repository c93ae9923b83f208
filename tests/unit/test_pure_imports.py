"""Pure code imports no native code: only ``engine/native/`` imports llama_cpp, and every module of
the pure folders (prompts, tools, client, adapters, server, remote...) and the engine's pure
modules (its contract, scheduler, bookkeeping) imports without it."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import NATIVE, only_unit_tests

ROOT = Path(__file__).resolve().parents[2]

PACKAGE = ROOT / "llamacpp_integrations"
# The only folder whose modules import llama_cpp.
NATIVE_DIR = PACKAGE / "engine" / "native"
# Folders whose every module is pure, and the pure modules of the engine's other folders (the
# rest build or drive contexts, so they import engine/native).
PURE_DIRS = [
    "prompts",
    "tools",
    "client",
    "multimodal",
    "models",
    "langchain",
    "llama_index",
    "server",
    "remote",
    "engine/embedding",
    "testing",
    "ray",
]
PURE_FILES = [
    "__init__.py",
    "errors.py",
    "engine/__init__.py",
    "engine/advice.py",
    "engine/batch.py",
    "engine/channel.py",
    "engine/config.py",
    "engine/interface.py",
    "engine/machine.py",
    "engine/registry.py",
    "engine/results.py",
    "engine/sizing.py",
    "engine/types.py",
    "engine/prompt_cache/disk_store.py",
    "engine/speculation/drafts.py",
    "engine/speculation/step.py",
    "engine/worker/active.py",
    "engine/worker/inbox.py",
    "engine/worker/logprobs.py",
    "engine/worker/output.py",
    "engine/worker/realign.py",
    "engine/worker/requests.py",
    "engine/worker/room.py",
    "engine/worker/scheduler.py",
    "engine/worker/stats.py",
]


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _pure_modules() -> list[str]:
    paths: list[Path] = [PACKAGE / name for name in PURE_FILES]
    for folder in PURE_DIRS:
        where = PACKAGE / folder
        paths += [where] if where.is_file() else sorted(where.rglob("*.py"))
    return sorted({_module(path) for path in paths})


PURE_MODULES = _pure_modules()


def test_only_the_native_folder_imports_llama_cpp() -> None:
    importers = []
    for path in PACKAGE.rglob("*.py"):
        if NATIVE_DIR in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(name == NATIVE or name.startswith(NATIVE + ".") for name in names):
                importers.append(str(path.relative_to(ROOT)))
    assert importers == []


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
