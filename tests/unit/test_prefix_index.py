"""The prefix index: the stored sequence sharing the longest prefix with a prompt, found to the
token by walking a trie of blocks, and forgotten cleanly."""

from __future__ import annotations

import random

import pytest

from llamacpp_integrations.engine.batch import common_prefix
from llamacpp_integrations.engine.prefix_index import PrefixIndex


def test_the_longest_shared_prefix_is_found_to_the_token() -> None:
    index: PrefixIndex[str] = PrefixIndex(block=4)
    index.add("a", range(100))
    index.add("b", [*range(50), 7, 7, 7])
    found = index.longest([*range(53), 9])  # 53 shared with "a", 50 with "b"
    assert found is not None and (found.key, found.n_shared) == ("a", 53)
    found = index.longest([*range(50), 7, 7, 1])
    assert found is not None and (found.key, found.n_shared) == ("b", 52)
    # A prefix shorter than one block is not found; a prompt shorter than a block neither.
    assert index.longest([0, 1, 2, 9]) is None
    assert index.longest([0, 1]) is None
    assert len(index) == 2 and "a" in index and index.tokens("b")[-1] == 7


def test_removing_and_replacing_keys() -> None:
    index: PrefixIndex[int] = PrefixIndex(block=8)
    index.add(1, range(40))
    index.add(2, range(40))
    index.remove(1)
    index.remove(1)  # twice: nothing happens
    found = index.longest(range(40))
    assert found is not None and found.key == 2
    index.add(2, range(100, 140))  # replaced: its old blocks are gone
    assert index.longest(range(40)) is None
    index.remove(2)
    assert len(index) == 0 and index.longest(range(100, 140)) is None
    with pytest.raises(ValueError):
        PrefixIndex(block=0)


def test_it_agrees_with_comparing_every_sequence() -> None:
    rng = random.Random(5)
    index: PrefixIndex[int] = PrefixIndex(block=16)
    stored = {}
    stem = [rng.randrange(50) for _ in range(300)]
    for key in range(60):
        cut = rng.randrange(0, 300)
        tokens = stem[:cut] + [rng.randrange(50) for _ in range(rng.randrange(0, 200))]
        stored[key] = tokens
        index.add(key, tokens)
    for key in range(0, 60, 3):
        index.remove(key)
        del stored[key]
    for _ in range(200):
        prompt = stem[: rng.randrange(0, 300)] + [rng.randrange(50) for _ in range(20)]
        best = max((common_prefix(t, prompt) for t in stored.values()), default=0)
        found = index.longest(prompt)
        if best < 16:
            assert found is None or found.n_shared == best
        else:
            assert found is not None and found.n_shared == best
            assert common_prefix(stored[found.key], prompt) == best
