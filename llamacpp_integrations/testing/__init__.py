"""Tests without weights: record what an engine answers once, replay it anywhere.

``RecordingEngine`` wraps any engine (local or remote) and writes every call to a cassette (a
JSON Lines file): the request's fingerprint, and what came back, stream chunk by stream chunk,
or the typed error. ``ReplayEngine`` answers from the cassette alone, with no model and without
importing llama.cpp, so a LangChain chain, an agent or a LlamaIndex query engine built on this
package runs in CI in a fraction of a second, with the recorded streaming, tool calls,
reasoning, usage and errors. The pytest plugin (``pytest_plugin.py``) gives each test its
cassette and a record mode; ``ScriptedEngine`` is a fake engine that says what a test tells it.

The modules: ``cassette`` (the file format), ``records`` (values to JSON), ``fingerprint``
(what identifies a request), ``matching`` (which recorded call answers a request),
``replay`` and ``recording`` (the engines), ``scripted`` and ``scripted_capabilities``
(the engine that answers from a script), and ``pytest_plugin``.
"""

from __future__ import annotations

from .cassette import CASSETTE_VERSION, Cassette, EngineRecord, Interaction
from .fingerprint import generation_fingerprint
from .matching import MatchOptions
from .recording import RecordingEngine, RecordMode
from .replay import ReplayEngine
from .scripted import (
    SCRIPTED_INFO,
    SCRIPTED_TIMINGS,
    Answer,
    ScriptedEngine,
    tool_calls_text,
)
from .scripted_capabilities import (
    ScriptedChunkingEngine,
    ScriptedLoraEngine,
    ScriptedRerankingEngine,
    ScriptedServer,
    ScriptedTokenPieceEngine,
)

__all__ = [
    "CASSETTE_VERSION",
    "SCRIPTED_INFO",
    "SCRIPTED_TIMINGS",
    "Answer",
    "Cassette",
    "EngineRecord",
    "Interaction",
    "MatchOptions",
    "RecordMode",
    "RecordingEngine",
    "ReplayEngine",
    "ScriptedChunkingEngine",
    "ScriptedEngine",
    "ScriptedLoraEngine",
    "ScriptedRerankingEngine",
    "ScriptedServer",
    "ScriptedTokenPieceEngine",
    "generation_fingerprint",
    "tool_calls_text",
]
