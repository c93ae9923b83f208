"""The cassette file: JSON Lines, read, checked, migrated and appended to.

The first line is the header: the format's name and ``version``, and the recorded engine (its
``ModelInfo``, media marker and optional capabilities). Every other line is one call, in the
order the calls finished::

    {"cassette": "llamacpp-integrations", "version": 1, "engine": {...}}
    {"kind": "stream", "request": {...}, "response": {"chunks": [...]}}
    {"kind": "embed", "request": {...}, "response": {"value": [[0.1, ...]]}}

One call per line keeps a re-recorded cassette's diff to the calls that changed. Nothing
secret is written: requests are fingerprints (``fingerprint.py``), the engine is its model
info, never a URL's credentials or a header. A call is appended as soon as it ends, so a test
that fails half-way keeps what it recorded.

Versions: a cassette of an older version is migrated on reading by the steps in
``MIGRATIONS`` (version n to n + 1), or refused with ``CassetteFormatError`` saying to record it
again; a newer one is refused, naming the version this package reads.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.results import ModelInfo
from ..errors import CassetteFormatError
from .records import model_info_from_json, model_info_to_json

__all__ = [
    "CASSETTE_VERSION",
    "MIGRATIONS",
    "Cassette",
    "EngineRecord",
    "Interaction",
]

CASSETTE_VERSION = 1
FORMAT_NAME = "llamacpp-integrations"
# Each step takes the lines (header first) of version n and returns them as version n + 1.
MIGRATIONS: dict[int, Callable[[list[dict[str, Any]]], list[dict[str, Any]]]] = {}
CAPABILITIES = frozenset({"rerank", "chunk", "token_piece"})


@dataclass(frozen=True)
class EngineRecord:
    """The recorded engine: what a replaying engine reports and offers.

    Attributes:
        info: Its ``ModelInfo``.
        media_marker: Where images go in a raw prompt (``None``: no images).
        capabilities: The optional capabilities it had: ``"rerank"`` (``RerankingEngine``),
            ``"chunk"`` (``ChunkingEngine``), ``"token_piece"`` (``TokenPieceEngine``).
        engine_type: Its class name, for people reading the cassette.
    """

    info: ModelInfo
    media_marker: str | None = None
    capabilities: frozenset[str] = frozenset()
    engine_type: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.engine_type,
            "capabilities": sorted(self.capabilities),
            "media_marker": self.media_marker,
            "info": model_info_to_json(self.info),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineRecord:
        return cls(
            info=model_info_from_json(data["info"]),
            media_marker=data.get("media_marker"),
            capabilities=frozenset(data.get("capabilities", ())) & CAPABILITIES,
            engine_type=data.get("type", ""),
        )


@dataclass(frozen=True)
class Interaction:
    """One recorded call: its ``kind`` (the engine method, ``agenerate`` recorded as
    ``generate``), its request's fingerprint, and what came back."""

    kind: str
    request: dict[str, Any]
    response: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "request": self.request, "response": self.response}


class Cassette:
    """A cassette file and the calls it holds (thread-safe).

    ``Cassette.load`` reads an existing file; ``Cassette(path)`` is one to record into (its file
    is written at the first ``add``). With ``overwrite`` (record mode ``all``) the first ``add``
    replaces the file instead of appending to it.
    """

    def __init__(
        self,
        path: str | Path | None,
        *,
        engine: EngineRecord | None = None,
        interactions: Iterable[Interaction] = (),
        overwrite: bool = False,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.engine = engine
        self._interactions = list(interactions)
        self._lock = threading.Lock()
        # The file holds this cassette's header and lines already, unless it is to be replaced.
        self._on_disk = not overwrite and self.path is not None and self.path.exists()

    def __repr__(self) -> str:
        return f"Cassette({str(self.path)!r}, {len(self._interactions)} calls)"

    @classmethod
    def load(cls, path: str | Path) -> Cassette:
        """Read the cassette at ``path``.

        Raises:
            CassetteFormatError: no file there, a line that is not JSON or not a call, no
                header, or a version this package cannot read.
        """
        where = Path(path)
        if not where.is_file():
            raise CassetteFormatError(
                "no cassette here: record it first (a RecordingEngine, or pytest "
                "--llamacpp-record-mode=once)",
                path=str(where),
            )
        lines = _read_lines(where)
        if not lines:
            raise CassetteFormatError("the file is empty: it has no header", path=str(where))
        lines = _migrated(lines, str(where))
        try:
            engine = EngineRecord.from_json(lines[0]["engine"])
            interactions = [
                Interaction(line["kind"], line["request"], line.get("response", {}))
                for line in lines[1:]
            ]
        except (KeyError, TypeError) as exc:
            raise CassetteFormatError(f"a line lacks a field ({exc})", path=str(where)) from exc
        return cls(where, engine=engine, interactions=interactions)

    @property
    def interactions(self) -> tuple[Interaction, ...]:
        """The recorded calls, in the order they ended."""
        with self._lock:
            return tuple(self._interactions)

    def add(self, interaction: Interaction) -> None:
        """Keep ``interaction`` and append it to the file (writing the header first when the
        file is new or replaced)."""
        with self._lock:
            self._interactions.append(interaction)
            if self.path is None:
                return
            if not self._on_disk:
                if self.engine is None:
                    raise CassetteFormatError("no engine for the header", path=str(self.path))
                self.path.parent.mkdir(parents=True, exist_ok=True)
                header = {
                    "cassette": FORMAT_NAME,
                    "version": CASSETTE_VERSION,
                    "engine": self.engine.to_json(),
                }
                self.path.write_text(_line(header), encoding="utf-8")
                self._on_disk = True
            with self.path.open("a", encoding="utf-8") as out:
                out.write(_line(interaction.to_json()))


def _line(data: dict[str, Any]) -> str:
    # ensure_ascii off: prompts and answers stay readable in a diff.
    return json.dumps(data, ensure_ascii=False) + "\n"


def _read_lines(path: Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CassetteFormatError(f"not UTF-8 text ({exc})", path=str(path)) from exc
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CassetteFormatError(f"not JSON: {exc.msg}", path=str(path), line=number) from exc
        if not isinstance(data, dict):
            raise CassetteFormatError("a line is not a JSON object", path=str(path), line=number)
        lines.append(data)
    return lines


def _migrated(lines: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    header = lines[0]
    if header.get("cassette") != FORMAT_NAME:
        raise CassetteFormatError(
            "not a llamacpp-integrations cassette (its first line has no "
            f'"cassette": "{FORMAT_NAME}")',
            path=path,
            line=1,
        )
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CassetteFormatError(f"bad format version {version!r}", path=path, line=1)
    if version > CASSETTE_VERSION:
        raise CassetteFormatError(
            f"format version {version} was written by a newer llamacpp-integrations; this one "
            f"reads versions up to {CASSETTE_VERSION}: upgrade it, or record the cassette again",
            path=path,
            line=1,
        )
    while version < CASSETTE_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise CassetteFormatError(
                f"format version {version} is older than this package can migrate (it reads "
                f"version {CASSETTE_VERSION}): record the cassette again",
                path=path,
                line=1,
            )
        lines = step(lines)
        version += 1
    return lines
