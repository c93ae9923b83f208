"""The pytest plugin: a cassette per test, replayed by default, recorded on request.

Installed with the package (entry point ``pytest11``), it adds:

* ``--llamacpp-record-mode`` (``none``, the default: replay only; ``once``: record the
  cassettes that do not exist yet; ``new_episodes``: replay what is recorded, record the rest;
  ``all``: record every cassette again);
* the ``llamacpp_cassette`` fixture, whose ``engine(real)`` is the engine a test uses: a
  ``ReplayEngine`` of the test's cassette, or, when recording, a ``RecordingEngine`` around
  ``real`` (a fixture's name, or a function making the engine), which is made only then, so a
  replay never loads a model;
* the ``llamacpp_cassette`` marker, naming the cassette and how requests match;
* the ``llamacpp_cassette_dir`` fixture (module scope) to override where cassettes live.

A test's cassette is ``<llamacpp_cassette_dir>/<test name>.llamacpp.jsonl``, by default
``cassettes/<module>/`` beside the test module, where pytest-recording keeps its HTTP cassettes,
so one test can hold both kinds. The plugin loads in every pytest session: this module imports
nothing of the package until a test asks for a cassette.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ..engine.interface import InferenceEngine
    from .matching import MatchOptions
    from .recording import RecordMode
    from .replay import ReplayEngine

__all__ = ["LlamaCppCassette"]

MODES = ("none", "once", "new_episodes", "all")
SUFFIX = ".llamacpp.jsonl"
MARKER = (
    "llamacpp_cassette(name=None, *, ignore_seed=False, ignore_sampling=False, ignore=(), "
    "in_order=False, allow_repeats=False, pace=False): the test's llamacpp cassette (file "
    "name, default the test's name) and how its requests are matched"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llamacpp", "llamacpp-integrations cassettes")
    group.addoption(
        "--llamacpp-record-mode",
        choices=MODES,
        default="none",
        help="none (default): replay cassettes only; once: record the missing ones; "
        "new_episodes: record calls no cassette answers; all: record every cassette again",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


class LlamaCppCassette:
    """A test's cassette: where it is, the record mode, and the engine that plays it.

    Attributes:
        path: The cassette file.
        mode: The record mode of this run.
        match: How requests are matched (from the marker).
        pace: Whether replayed streams keep their recorded delays.
    """

    def __init__(
        self,
        path: Path,
        mode: RecordMode,
        match: MatchOptions,
        pace: bool,
        request: pytest.FixtureRequest,
    ) -> None:
        self.path = path
        self.mode: RecordMode = mode
        self.match = match
        self.pace = pace
        self._request = request
        # Decided when the test starts: ``once`` records only a cassette that was not there.
        self.replaying = mode == "none" or (mode == "once" and path.exists())
        self._engine: ReplayEngine | None = None

    def __repr__(self) -> str:
        return f"LlamaCppCassette({str(self.path)!r}, mode={self.mode!r})"

    def engine(self, real: str | Callable[[], InferenceEngine] | None = None) -> InferenceEngine:
        """The engine of this test: the cassette replayed, or, when recording, ``real`` (a
        fixture's name, or a function that makes the engine) with every call recorded.

        ``real`` is used only when recording, so a replay never loads a model. The engine it
        gives stays open after the test: a session fixture's engine, or one you close.
        """
        if self._engine is not None:
            return self._engine
        if self.replaying:
            from .replay import ReplayEngine

            self._engine = ReplayEngine(self.path, match=self.match, pace=self.pace)
            return self._engine
        if real is None:
            pytest.fail(
                f"--llamacpp-record-mode={self.mode} records {self.path.name}, which needs a "
                "real engine: llamacpp_cassette.engine(<fixture name or factory>)"
            )
        from .recording import RecordingEngine

        made: InferenceEngine = (
            self._request.getfixturevalue(real) if isinstance(real, str) else real()
        )
        self._engine = RecordingEngine(made, self.path, mode=self.mode, match=self.match)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()


@pytest.fixture(scope="module")
def llamacpp_cassette_dir(request: pytest.FixtureRequest) -> Path:
    """Where this module's llamacpp cassettes are: ``cassettes/<module>/`` beside it."""
    module = Path(request.node.path)
    return module.parent / "cassettes" / module.stem


@pytest.fixture
def llamacpp_record_mode(request: pytest.FixtureRequest) -> str:
    """The record mode of this run (``--llamacpp-record-mode``)."""
    mode: str = request.config.getoption("--llamacpp-record-mode")
    return mode


@pytest.fixture
def llamacpp_cassette(
    request: pytest.FixtureRequest, llamacpp_cassette_dir: Path, llamacpp_record_mode: str
) -> Iterator[LlamaCppCassette]:
    """This test's cassette; ``llamacpp_cassette.engine(real)`` is the engine to test with."""
    from .matching import MatchOptions

    marker = request.node.get_closest_marker("llamacpp_cassette")
    args: tuple[Any, ...] = marker.args if marker else ()
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    pace = bool(options.pop("pace", False))
    if "ignore" in options:
        options["ignore"] = tuple(options["ignore"])
    try:
        match = MatchOptions(**options)
    except TypeError as exc:
        pytest.fail(f"@pytest.mark.llamacpp_cassette: {exc}")
    name = args[0] if args else _file_name(request.node.name)
    path = Path(llamacpp_cassette_dir) / (name if name.endswith(".jsonl") else name + SUFFIX)
    if llamacpp_record_mode not in MODES:
        pytest.fail(f"unknown llamacpp record mode {llamacpp_record_mode!r}")
    cassette = LlamaCppCassette(path, llamacpp_record_mode, match, pace, request)  # type: ignore[arg-type]
    try:
        yield cassette
    finally:
        cassette.close()


def _file_name(test_name: str) -> str:
    # A parametrized test's id may hold characters a file name cannot ("/", ":"...).
    return re.sub(r"[^\w\[\]\-.=,+]", "_", test_name)
