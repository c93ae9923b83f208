"""The registry's locking, with a stand-in loader whose "load" (of a ``ScriptedEngine``) blocks
until released.

Loading a real model takes seconds; what matters here is who waits for whom: a load of one
configuration must not hold up callers of another, and concurrent callers of one configuration
must share a single load. (The real sharing of weights is tested in tests/integration.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llamacpp_integrations.engine import EngineConfig, registry
from llamacpp_integrations.testing import ScriptedEngine


@dataclass
class SlowLoader:
    """Opens a scripted engine where the registry would load a model: a load of a file named in
    ``gates`` waits for its gate, a file named ``broken*`` fails to load, and ``loads`` keeps
    the file names in the order their loads began."""

    loads: list[str] = field(default_factory=list)
    gates: dict[str, threading.Event] = field(default_factory=dict)

    def __call__(self, config: EngineConfig) -> ScriptedEngine:
        assert config.model is not None
        name = Path(config.model).name
        self.loads.append(name)
        gate = self.gates.get(name)
        if gate is not None and not gate.wait(10):
            raise TimeoutError("test gate never opened")
        if name.startswith("broken"):
            raise RuntimeError("cannot load")
        return ScriptedEngine()


@pytest.fixture
def loader(monkeypatch: pytest.MonkeyPatch) -> SlowLoader:
    made = SlowLoader()
    monkeypatch.setattr(registry, "open_local_engine", made)
    return made


@pytest.fixture
def models(tmp_path: Path, loader: SlowLoader) -> Iterator[dict[str, str]]:
    paths = {}
    for name in ("slow.gguf", "fast.gguf", "broken.gguf"):
        path = tmp_path / name
        path.write_bytes(b"GGUF")  # resolution only needs the file to exist
        paths[name] = str(path)
    yield paths


def test_a_slow_load_does_not_block_other_models(
    models: dict[str, str], loader: SlowLoader
) -> None:
    loader.gates["slow.gguf"] = gate = threading.Event()
    slow = threading.Thread(
        target=registry.shared_engine, args=(EngineConfig(model=models["slow.gguf"]),)
    )
    slow.start()
    while "slow.gguf" not in loader.loads:
        threading.Event().wait(0.001)
    # The slow load is in progress: another model is served right away.
    fast = registry.shared_engine(EngineConfig(model=models["fast.gguf"]))
    assert fast is registry.shared_engine(EngineConfig(model=models["fast.gguf"]))
    assert slow.is_alive()
    gate.set()
    slow.join(10)
    assert loader.loads.count("slow.gguf") == 1


def test_concurrent_callers_share_one_load(models: dict[str, str], loader: SlowLoader) -> None:
    loader.gates["slow.gguf"] = gate = threading.Event()
    config = EngineConfig(model=models["slow.gguf"])
    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(registry.shared_engine(config)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    while "slow.gguf" not in loader.loads:
        threading.Event().wait(0.001)
    gate.set()
    for thread in threads:
        thread.join(10)
    assert loader.loads == ["slow.gguf"]
    assert len(results) == 4 and all(engine is results[0] for engine in results)


def test_a_failed_load_is_retried_by_the_next_caller(
    models: dict[str, str], loader: SlowLoader
) -> None:
    config = EngineConfig(model=models["broken.gguf"])
    for _ in range(2):
        with pytest.raises(RuntimeError, match="cannot load"):
            registry.shared_engine(config)
    assert loader.loads == ["broken.gguf", "broken.gguf"]
    assert registry._LOADING == {}
