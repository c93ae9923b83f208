"""Things loaded once per file and shared by every engine of a host that uses them (projectors,
draft models): taken with a count, freed when the last user gives them back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["SharedByFile"]

T = TypeVar("T")


class SharedByFile(Generic[T]):
    """One loaded ``T`` per file, with how many users hold it (worker thread only)."""

    def __init__(self, close: Callable[[T], None]) -> None:
        self._close = close
        self._held: dict[str, tuple[T, int]] = {}

    def take(self, file: str, load: Callable[[], T]) -> T:
        """The file's loaded object (loaded now if nobody holds it), one more user counted."""
        held = self._held.get(file)
        item = load() if held is None else held[0]
        self._held[file] = (item, 1 if held is None else held[1] + 1)
        return item

    def drop(self, item: T) -> None:
        """One user fewer for ``item``; the last one frees it."""
        for file, (held, count) in list(self._held.items()):
            if held is item:
                if count > 1:
                    self._held[file] = (held, count - 1)
                else:
                    del self._held[file]
                    self._close(held)

    def files(self) -> list[str]:
        """The files loaded (a snapshot)."""
        return list(self._held.copy())

    def close_all(self) -> None:
        """Free everything, users or not (the worker is stopping)."""
        for held, _ in self._held.values():
            self._close(held)
        self._held.clear()
