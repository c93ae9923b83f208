"""Loaded once per file, freed by the last user."""

from __future__ import annotations

from llamacpp_integrations.engine.worker.shared_files import SharedByFile


class Thing:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False


def test_one_load_per_file_freed_by_the_last_user() -> None:
    loads: list[str] = []
    shared = SharedByFile[Thing](lambda thing: setattr(thing, "closed", True))

    def load(name: str) -> Thing:
        loads.append(name)
        return Thing(name)

    a = shared.take("a.gguf", lambda: load("a"))
    again = shared.take("a.gguf", lambda: load("a"))
    b = shared.take("b.gguf", lambda: load("b"))
    assert again is a and loads == ["a", "b"]
    assert sorted(shared.files()) == ["a.gguf", "b.gguf"]
    shared.drop(a)
    assert not a.closed
    shared.drop(a)
    assert a.closed and shared.files() == ["b.gguf"]
    shared.drop(Thing("never taken"))  # not held: nothing happens
    shared.close_all()
    assert b.closed and shared.files() == []
