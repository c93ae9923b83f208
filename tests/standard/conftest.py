"""Standard-suite hooks: a module may run its async tests in one event loop per module."""

from __future__ import annotations

import inspect

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The async tests of a module that sets ``ASYNC_LOOP_SCOPE`` run in a loop of that scope.

    Some clients share one async HTTP client per base URL across instances (LangChain's
    ``ChatAnthropic`` does), whose connections belong to the loop that opened them; with a loop
    per test, the second async test would find them on a closed loop. The suite's tests are
    inherited, so the mark is added here rather than on each of them (a module-wide mark would
    mark its sync tests too).
    """
    for item in items:
        scope = getattr(getattr(item, "module", None), "ASYNC_LOOP_SCOPE", None)
        test = getattr(item, "function", None)
        if scope is not None and inspect.iscoroutinefunction(test):
            # First, so that it is the closest asyncio mark, before the one auto mode adds.
            item.add_marker(pytest.mark.asyncio(loop_scope=scope), append=False)
