"""``test_render.py`` is pure: run on its own (or beside the unit tests), importing
``llama_cpp`` fails the session, as in ``tests/unit`` (the same blocker), so rendering every
real template stays something a machine without a working llama.cpp build can check."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.unit.conftest import NATIVE, UNIT_DIR, NativeImportBlocker

PURE_TESTS = Path(__file__).resolve().parent / "test_render.py"


def only_pure_tests(args: Sequence[str]) -> bool:
    paths = [Path(arg.split("::")[0]).resolve() for arg in args if not arg.startswith("-")]
    return bool(paths) and all(p in (PURE_TESTS, UNIT_DIR) or UNIT_DIR in p.parents for p in paths)


def pytest_configure(config: pytest.Config) -> None:
    if only_pure_tests(config.args):
        assert NATIVE not in sys.modules, "llama_cpp was imported before the pure tests began"
        if not any(isinstance(finder, NativeImportBlocker) for finder in sys.meta_path):
            sys.meta_path.insert(0, NativeImportBlocker())
