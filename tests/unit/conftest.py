"""Unit tests cover pure code: run on their own, they run where llama.cpp cannot be imported.

When every path given to pytest is inside ``tests/unit`` (``make unit`` and ``make test`` run
them so), importing ``llama_cpp`` raises ``ModuleNotFoundError`` for the whole session: a pure
module or a unit test that starts loading native code fails here, not later on a machine
without a working build. Mixed with other tests in one session the guard stays off (they need
the library), and ``test_pure_imports.py`` checks the pure modules in a subprocess instead.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

import pytest

UNIT_DIR = Path(__file__).resolve().parent
NATIVE = "llama_cpp"


class NativeImportBlocker(MetaPathFinder):
    """Refuses ``llama_cpp`` and its submodules."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == NATIVE or fullname.startswith(NATIVE + "."):
            raise ModuleNotFoundError(f"{fullname} is blocked: unit tests run on pure code")
        return None


def only_unit_tests(args: Sequence[str]) -> bool:
    paths = [Path(arg.split("::")[0]).resolve() for arg in args if not arg.startswith("-")]
    return bool(paths) and all(p == UNIT_DIR or UNIT_DIR in p.parents for p in paths)


def pytest_configure(config: pytest.Config) -> None:
    if only_unit_tests(config.args):
        assert NATIVE not in sys.modules, "llama_cpp was imported before the unit tests began"
        sys.meta_path.insert(0, NativeImportBlocker())
