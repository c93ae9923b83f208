"""Which stored token sequence shares the longest prefix with a prompt, without comparing the
prompt with every one of them: a trie over blocks of tokens.

Each stored sequence (under a key: a file name, a slot) is cut into blocks of ``block`` tokens;
a node of the trie is one block after the blocks of its parent, and lists the keys whose
sequences pass through it. A lookup walks the prompt's blocks down as far as any stored
sequence follows, then compares the prompt with the sequences at the deepest node from there
on, to the token. A lookup costs the prompt's blocks plus one comparison per key at that node,
however many sequences are stored; a shared prefix shorter than one block is not found.

Pure: no llama.cpp, no files.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .batch import common_prefix

__all__ = ["PrefixIndex", "PrefixMatch"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class PrefixMatch(Generic[K]):
    """The key whose sequence shares the longest prefix with a prompt: ``n_shared`` tokens."""

    key: K
    tokens: tuple[int, ...]
    n_shared: int


@dataclass
class _Node(Generic[K]):
    keys: set[K] = field(default_factory=set)
    children: dict[tuple[int, ...], _Node[K]] = field(default_factory=dict)


class PrefixIndex(Generic[K]):
    """Token sequences under keys, found by the longest prefix they share with a prompt.

    Args:
        block: Tokens per trie level: smaller finds shorter shared prefixes, larger walks a
            long prompt in fewer steps.
    """

    def __init__(self, block: int = 16) -> None:
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        self.block = block
        self._root: _Node[K] = _Node()
        self._tokens: dict[K, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, key: object) -> bool:
        return key in self._tokens

    def keys(self) -> list[K]:
        """The stored keys."""
        return list(self._tokens)

    def tokens(self, key: K) -> tuple[int, ...]:
        """The sequence stored under ``key``."""
        return self._tokens[key]

    def add(self, key: K, tokens: Sequence[int]) -> None:
        """Store ``tokens`` under ``key`` (replacing what it held)."""
        if key in self._tokens:
            self.remove(key)
        stored = tuple(tokens)
        self._tokens[key] = stored
        node = self._root
        for block in self._blocks(stored):
            node = node.children.setdefault(block, _Node())
            node.keys.add(key)

    def remove(self, key: K) -> None:
        """Forget ``key`` (nothing happens when it is not stored)."""
        stored = self._tokens.pop(key, None)
        if stored is None:
            return
        path = [self._root]
        for block in self._blocks(stored):
            node = path[-1].children[block]
            node.keys.discard(key)
            path.append(node)
        # Prune the nodes no sequence passes through any more, deepest first.
        for parent, block in zip(reversed(path[:-1]), reversed(self._blocks(stored)), strict=True):
            if parent.children[block].keys:
                break
            del parent.children[block]

    def longest(self, prompt: Sequence[int]) -> PrefixMatch[K] | None:
        """The stored sequence sharing the longest prefix with ``prompt`` (at least one
        block), or ``None``."""
        node, depth, size = self._root, 0, self.block
        while depth + size <= len(prompt):
            child = node.children.get(tuple(prompt[depth : depth + size]))
            if child is None:
                break
            node, depth = child, depth + size
        if node is self._root:
            return None
        best: PrefixMatch[K] | None = None
        rest = prompt[depth:]
        for key in node.keys:
            stored = self._tokens[key]
            n = depth + common_prefix(stored[depth:], rest)
            if best is None or n > best.n_shared:
                best = PrefixMatch(key, stored, n)
        return best

    def _blocks(self, tokens: Sequence[int]) -> list[tuple[int, ...]]:
        size = self.block
        return [tuple(tokens[i : i + size]) for i in range(0, len(tokens) - size + 1, size)]
