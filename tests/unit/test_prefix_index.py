"""The prefix index: what every stored sequence shares with a prompt, found to the token by
walking a trie of blocks, kept current as sequences grow and shrink, forgotten cleanly, and cut
back least recently used block first."""

from __future__ import annotations

import random

import pytest

from llamacpp_integrations.engine.batch import common_prefix
from llamacpp_integrations.engine.prefix_index import PrefixIndex


def test_what_each_sequence_shares_is_found_to_the_token() -> None:
    index: PrefixIndex[str] = PrefixIndex(block=4)
    index.add("a", range(100))
    index.add("b", [*range(50), 7, 7, 7])
    assert index.shared([*range(53), 9]) == {"a": 53, "b": 50}
    assert index.shared([*range(50), 7, 7, 1]) == {"a": 50, "b": 52}
    # Within the first block, and for a prompt shorter than a block, too.
    assert index.shared([0, 1, 2, 9]) == {"a": 3, "b": 3}
    assert index.shared([0, 1]) == {"a": 2, "b": 2}
    assert index.shared([5]) == {"a": 0, "b": 0}
    assert len(index) == 2 and "a" in index and index.tokens("b")[-1] == 7


def test_removing_and_replacing_keys() -> None:
    index: PrefixIndex[int] = PrefixIndex(block=8)
    index.add(1, range(40))
    index.add(2, range(40))
    index.remove(1)
    index.remove(1)  # twice: nothing happens
    assert index.shared(range(40)) == {2: 40}
    index.add(2, range(100, 140))  # replaced: its old blocks are gone
    assert index.shared(range(40)) == {2: 0}
    index.remove(2)
    assert len(index) == 0 and index.shared(range(100, 140)) == {}
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
        assert index.shared(prompt) == {k: common_prefix(t, prompt) for k, t in stored.items()}


def test_every_key_gets_what_it_shares_with_a_prompt_through_growth_and_cuts() -> None:
    """``shared`` answers to the token for every key, as sequences grow a token at a time,
    are cut back and replaced, as a running slot's cells are."""
    rng = random.Random(11)
    index: PrefixIndex[int] = PrefixIndex(block=4)
    stored: dict[int, list[int]] = {}
    stem = [rng.randrange(3) for _ in range(120)]
    for step in range(600):
        key = rng.randrange(8)
        if key not in stored:
            index.extend(key, [])  # listed, empty
        tokens = stored.setdefault(key, [])
        move = rng.random()
        if move < 0.6:
            more = [rng.randrange(3) for _ in range(rng.choice([1, 1, 1, 5, 17]))]
            index.extend(key, more)
            tokens.extend(more)
        elif move < 0.8:
            n = rng.randrange(len(tokens) + 1)
            index.truncate(key, n)
            del tokens[n:]
        elif move < 0.95:
            new = stem[: rng.randrange(120)] + [rng.randrange(3) for _ in range(rng.randrange(9))]
            index.add(key, new)
            tokens[:] = new
        else:
            index.remove(key)
            del stored[key]
        if step % 7 == 0:
            prompt = stem[: rng.randrange(120)] + [rng.randrange(3) for _ in range(5)]
            assert index.shared(prompt) == {k: common_prefix(t, prompt) for k, t in stored.items()}
            assert all(list(index.tokens(k)) == t for k, t in stored.items())
    for key in list(stored):
        index.remove(key)
    assert len(index) == 0 and index.shared(stem) == {}


def test_eviction_cuts_the_least_recently_used_blocks_first() -> None:
    index: PrefixIndex[str] = PrefixIndex(block=4)
    system = list(range(100, 112))  # three blocks every chat shares
    index.add("old", [*system, *range(20)])  # 32 tokens: 5 blocks of its own
    index.add("hot", [*system, *range(50, 58), 1])  # 2 blocks of its own and a partial one
    index.touch("hot", 12)  # a request just kept the system prompt from it
    keys = ("old", "hot")
    cut = index.evict(8, cuttable=keys, holders=keys, pinned=())
    assert cut == {"old": 24}  # its two last blocks, the oldest
    cut = index.evict(100, cuttable=keys, holders=keys, pinned=())
    # The rest of "old" went, then "hot" back to the shared blocks, then the shared blocks.
    assert cut == {"old": 0, "hot": 0}
    assert index.shared(system) == {"old": 0, "hot": 0}


def test_eviction_never_cuts_a_block_a_pinned_key_passes_through() -> None:
    index: PrefixIndex[str] = PrefixIndex(block=4)
    system = list(range(100, 112))
    index.add("idle", [*system, 1, 2, 3, 4, 5])
    index.add("running", [*system, 9, 9, 9, 9])
    index.add("reading", [*range(40, 56)])  # a prompt not read yet: pinned too
    index.add("copy", list(range(40, 48)))  # an idle slot holding the start of that prompt
    cut = index.evict(
        1000,
        cuttable=("idle", "copy"),
        holders=("idle", "copy", "running"),
        pinned=("running", "reading"),
    )
    assert cut == {"idle": 12}  # its own block and its partial tail, not the shared ones
    assert list(index.tokens("idle")) == system
    assert list(index.tokens("copy")) == list(range(40, 48))


def test_a_block_idle_keys_share_counts_once() -> None:
    index: PrefixIndex[int] = PrefixIndex(block=4)
    index.add(1, range(8))
    index.add(2, range(8))
    index.add(3, range(20, 28))
    index.touch(3, 8)  # the newest
    index.add(4, range(100, 116))  # a saved file's tokens, say: neither cut nor counted
    # Keys 1 and 2 hold one prefix (in a unified cache, often the same cells): a block of
    # theirs is freed once both left it, so eight tokens take both their blocks.
    keys = (1, 2, 3)
    assert index.evict(8, cuttable=keys, holders=keys, pinned=()) == {1: 0, 2: 0}
    assert list(index.tokens(3)) == list(range(20, 28))
    assert index.evict(100, cuttable=keys, holders=keys, pinned=()) == {3: 0}
    assert len(index.tokens(4)) == 16
