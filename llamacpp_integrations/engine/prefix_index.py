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
was last used (made, or ``touch`` ed by a sequence that kept it); ``evict`` cuts sequences back
from their least recently used last blocks, never inside a block a pinned key passes through.

Pure: no llama.cpp, no files.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .batch import common_prefix

__all__ = ["PrefixIndex"]

K = TypeVar("K", bound=Hashable)


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

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._tokens))

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

    # ---- eviction ---------------------------------------------------------------------------

    def evict(
        self,
        n_tokens: int,
        *,
        cuttable: Collection[K],
        holders: Collection[K],
        pinned: Collection[K],
    ) -> dict[K, int]:
        """Cut ``cuttable`` keys back a block at a time, the one whose last full block was
        used least recently first, until about ``n_tokens`` tokens are freed, or none is left
        to cut. A block is freed once no key of ``holders`` passes through it any more (keys
        may share one copy of a block); a key is never cut inside a block a ``pinned`` key
        passes through. Keys of neither kind (a saved file's) are neither cut nor counted.
        A key's tokens after its last full block go with that block. Returns the new length
        of every key cut."""
        order = itertools.count()  # ties: the first offered first
        heap: list[tuple[int, int, K]] = []

        def offer(key: K) -> None:
            path = self._paths[key]
            if path and path[-1].keys.isdisjoint(pinned):
                heapq.heappush(heap, (path[-1].stamp, next(order), key))

        for key in cuttable:
            if key in self._tokens:
                offer(key)
        cut: dict[K, int] = {}
        freed = 0
        while heap and freed < n_tokens:
            key = heapq.heappop(heap)[2]
            node = self._paths[key][-1]
            start = (node.depth - 1) * self.block
            n_cut = len(self._tokens[key]) - start
            self.truncate(key, start)
            cut[key] = start
            if node.keys.isdisjoint(holders):
                freed += n_cut
            offer(key)
        return cut
