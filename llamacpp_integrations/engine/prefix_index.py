"""Which stored token sequences share how long a prefix with a prompt, without comparing the
prompt with every one of them: a trie over blocks of tokens.

Each stored sequence (under a key: a slot's cells, a prompt being read, a saved file) is cut
into blocks of ``block`` tokens; a node of the trie is one block after the blocks of its parent,
and lists the keys whose sequences pass through it. A lookup walks the prompt's blocks down;
where a key leaves the path (or at the deepest node), its sequence is compared with the prompt
inside that one block only. So a lookup costs the prompt's blocks plus at most a block's
comparison per key, however long the sequences are.

Sequences may grow and shrink in place (``extend``, ``truncate``): a running sequence appends
a token per step, and the trie changes only when a block fills. Every node remembers when it
was last used (made, or ``touch`` ed by a sequence that kept it); ``evict`` cuts the sequences
back from the least recently used leaf blocks, never from a block a pinned key passes through.

Pure: no llama.cpp, no files.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Hashable, Sequence
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


@dataclass(eq=False)
class _Node(Generic[K]):
    depth: int  # blocks from the root to this node, this one included
    keys: set[K] = field(default_factory=set)
    children: dict[tuple[int, ...], _Node[K]] = field(default_factory=dict)
    stamp: int = 0  # when it was last made or kept


class PrefixIndex(Generic[K]):
    """Token sequences under keys, found by the prefix they share with a prompt.

    Args:
        block: Tokens per trie level: a longer block walks a long prompt in fewer steps, a
            shorter one evicts in finer steps and finds a prefix of a single block sooner.
    """

    def __init__(self, block: int = 16) -> None:
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        self.block = block
        self._root: _Node[K] = _Node(depth=0)
        self._tokens: dict[K, list[int]] = {}
        self._paths: dict[K, list[_Node[K]]] = {}  # the nodes of each key's full blocks
        self._clock = 0

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, key: object) -> bool:
        return key in self._tokens

    def keys(self) -> list[K]:
        """The stored keys."""
        return list(self._tokens)

    def tokens(self, key: K) -> Sequence[int]:
        """The sequence stored under ``key`` (empty when there is none); read-only."""
        return self._tokens.get(key, ())

    # ---- changes ----------------------------------------------------------------------------

    def add(self, key: K, tokens: Sequence[int]) -> None:
        """Store ``tokens`` under ``key``, replacing what it held (the blocks both share stay,
        with when they were last used)."""
        stored = self._tokens.get(key)
        if stored is None:
            self.extend(key, tokens)
            return
        n = common_prefix(stored, tokens)
        self.truncate(key, n)
        self.extend(key, tokens[n:])

    def extend(self, key: K, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to the sequence under ``key`` (a new key starts empty)."""
        stored = self._tokens.setdefault(key, [])
        path = self._paths.setdefault(key, [])
        stored.extend(tokens)
        size = self.block
        if (len(path) + 1) * size > len(stored):
            return
        self._clock += 1
        while (len(path) + 1) * size <= len(stored):
            parent = path[-1] if path else self._root
            label = tuple(stored[len(path) * size : (len(path) + 1) * size])
            node = parent.children.get(label)
            if node is None:
                node = parent.children[label] = _Node(depth=parent.depth + 1)
            node.keys.add(key)
            node.stamp = self._clock
            path.append(node)

    def truncate(self, key: K, n: int) -> None:
        """Keep only the first ``n`` tokens under ``key``."""
        stored = self._tokens.get(key)
        if stored is None or n >= len(stored):
            return
        path = self._paths[key]
        size = self.block
        while len(path) > n // size:
            node = path.pop()
            node.keys.discard(key)
            if not node.keys:  # nothing passes through it (nor its children) any more
                parent = path[-1] if path else self._root
                del parent.children[tuple(stored[len(path) * size : (len(path) + 1) * size])]
        del stored[n:]

    def remove(self, key: K) -> None:
        """Forget ``key`` (nothing happens when it is not stored)."""
        if key in self._tokens:
            self.truncate(key, 0)
            del self._tokens[key]
            del self._paths[key]

    def touch(self, key: K, n: int) -> None:
        """The first ``n`` tokens under ``key`` were used now (for eviction's order)."""
        self._clock += 1
        for node in self._paths.get(key, [])[: -(-n // self.block)]:
            node.stamp = self._clock

    # ---- lookups ----------------------------------------------------------------------------

    def shared(self, prompt: Sequence[int]) -> dict[K, int]:
        """How many leading tokens every stored sequence shares with ``prompt``, to the token."""
        result: dict[K, int] = {}
        size = self.block
        node, depth = self._root, 0
        passing: Collection[K] = self._tokens.keys()
        while passing:
            label = tuple(prompt[depth : depth + size])
            child = node.children.get(label) if len(label) == size else None
            staying: Collection[K] = () if child is None else child.keys
            if len(staying) < len(passing):  # some leave the path within this block
                for key in passing:
                    if key not in staying:
                        stored = self._tokens[key]
                        result[key] = depth + common_prefix(stored[depth : depth + size], label)
            if child is None:
                break
            node, depth, passing = child, depth + size, staying
        return result

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
                best = PrefixMatch(key, tuple(stored), n)
        return best

    # ---- eviction ---------------------------------------------------------------------------

    def evict(self, n_tokens: int, pinned: Collection[K]) -> dict[K, int]:
        """Cut sequences back, least recently used leaf block first, until about ``n_tokens``
        tokens are gone (a block shared by several keys counts once: it is one copy of cells
        when they share them), or no block is left that no ``pinned`` key passes through.
        A key's tokens after its last full block go with that block. Returns the new length
        of every key cut."""
        order = itertools.count()  # ties: the first found first
        heap: list[tuple[int, int, int, _Node[K]]] = []

        def offer(node: _Node[K]) -> None:
            if node is not self._root and not node.children and node.keys.isdisjoint(pinned):
                heapq.heappush(heap, (node.stamp, -node.depth, next(order), node))

        stack = [self._root]
        while stack:
            node = stack.pop()
            offer(node)
            stack.extend(node.children.values())
        cut: dict[K, int] = {}
        freed = 0
        while heap and freed < n_tokens:
            node = heapq.heappop(heap)[3]
            if node.children or not node.keys:
                continue  # changed since it was offered
            start = (node.depth - 1) * self.block
            some_key = next(iter(node.keys))
            parent = self._paths[some_key][node.depth - 2] if node.depth > 1 else self._root
            freed += max(len(self._tokens[key]) - start for key in node.keys)
            for key in list(node.keys):
                self.truncate(key, start)
                cut[key] = start
            offer(parent)
        return cut
