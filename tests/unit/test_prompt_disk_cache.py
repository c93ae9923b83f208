"""The prompt cache's files: atomic entries, longest shared prefix, LRU cap, and every kind of
damaged file ignored (and deleted) instead of failing."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from llamacpp_integrations.engine.prompt_cache.disk_store import PromptDiskCache

PROMPT = tuple(range(1000, 1400))


def _cache(directory: Path, model: str = "model-a", **kwargs: int) -> PromptDiskCache:
    kwargs.setdefault("max_bytes", 10_000_000)
    kwargs.setdefault("min_tokens", 100)
    return PromptDiskCache(directory, model, **kwargs)


def test_an_entry_round_trips_and_is_found_by_a_shared_prefix(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    state = os.urandom(5000)
    assert cache.save(PROMPT, state) is not None
    found = _cache(tmp_path).find((*PROMPT[:300], 7, 8, 9))  # a fresh instance: a restart
    assert found is not None and found.n_shared == 300 and found.tokens == PROMPT
    assert _cache(tmp_path).load(found) == state
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_too_short_a_shared_prefix_or_another_model_finds_nothing(tmp_path: Path) -> None:
    _cache(tmp_path).save(PROMPT, b"state")
    assert _cache(tmp_path).find((*PROMPT[:50], 1, 2)) is None
    assert _cache(tmp_path, "model-b").find(PROMPT) is None
    assert len(list(tmp_path.iterdir())) == 1  # another model's file is left to that model


def test_the_longest_shared_prefix_wins(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.save(PROMPT[:200], b"short")
    cache.save(PROMPT, b"long")
    found = cache.find((*PROMPT[:350], 5))
    assert found is not None and found.n_shared == 350 and cache.load(found) == b"long"


def test_files_another_engine_saves_or_deletes_are_seen_and_headers_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, other = _cache(tmp_path), _cache(tmp_path)
    assert mine.find(PROMPT) is None
    other.save(PROMPT, b"theirs")
    found = mine.find((*PROMPT[:200], 1))
    assert found is not None and found.n_shared == 200
    # Many lookups read no header again (the index keeps the tokens).
    reads = []
    original = PromptDiskCache._read_tokens
    monkeypatch.setattr(
        PromptDiskCache,
        "_read_tokens",
        lambda self, path: reads.append(path) or original(self, path),
    )
    for n in range(150, 400, 10):
        assert mine.find((*PROMPT[:n], 1)) is not None
    assert reads == []
    found.path.unlink()  # the other engine's cap deleted it
    time.sleep(0.01)
    os.utime(tmp_path)  # (the deletion changed the directory's time; make sure of it here)
    assert mine.find(PROMPT) is None


@pytest.mark.parametrize(
    "damage",
    ["truncate", "flip", "garbage", "empty", "other-model"],
)
def test_a_damaged_file_is_ignored_with_a_warning_and_deleted(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = _cache(tmp_path)
    path = cache.save(PROMPT, os.urandom(4000))
    assert path is not None
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # saved by another model under this model's name
        other = _cache(tmp_path / "other", "model-b").save(PROMPT, os.urandom(4000))
        assert other is not None
        path.write_bytes(other.read_bytes())
    fresh = _cache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="llamacpp_integrations.engine"):
        found = fresh.find(PROMPT)
        assert found is None or fresh.load(found) is None
    assert "prompt cache: ignoring and deleting" in caplog.text
    assert not path.exists()


def test_the_directory_stays_under_its_cap_least_recently_used_first(tmp_path: Path) -> None:
    cache = _cache(tmp_path, max_bytes=40_000)  # three entries fit, not four
    prompts = [tuple(range(k * 1000, k * 1000 + 200)) for k in range(3)]
    for k, prompt in enumerate(prompts):
        cache.save(prompt, os.urandom(10_000))
        os.utime(cache.path_for(prompt), (k, k))  # distinct ages, whatever the clock's grain
    found = cache.find(prompts[0])
    assert found is not None and cache.load(found) is not None  # the oldest is used again
    cache.save(tuple(range(9000, 9200)), os.urandom(10_000))
    assert cache.has(prompts[0]) and not cache.has(prompts[1])
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 40_000


def test_concurrent_writers_never_leave_a_damaged_file(tmp_path: Path) -> None:
    states = [bytes([k]) * 50_000 for k in range(4)]
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            cache = _cache(tmp_path)
            for _ in range(10):
                cache.save(PROMPT, states[k])
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    def reader() -> None:
        cache = _cache(tmp_path)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            found = cache.find(PROMPT)
            if found is not None:
                loaded = cache.load(found)
                assert loaded is None or loaded in states

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    threads.append(threading.Thread(target=reader))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    found = _cache(tmp_path).find(PROMPT)
    assert found is not None and _cache(tmp_path).load(found) in states
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []


def test_an_unwritable_directory_is_logged_not_raised(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.directory = tmp_path / "gone"
    assert cache.save(PROMPT, b"x") is None
