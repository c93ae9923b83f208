"""The fleet's routing and health logic (``remote/routing.py``), with a hand-stepped clock."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamacpp_integrations.errors import InvalidRequestError
from llamacpp_integrations.remote.routing import HashRing, Router, ring_hash

URLS = ["http://a:1", "http://b:2", "http://c:3"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def router(**options: object) -> tuple[Router, Clock]:
    clock = Clock()
    settings_: dict[str, object] = {"cooldown": 10.0, "probe_interval": 2.0, **options}
    return Router(URLS, clock=clock, **settings_), clock  # type: ignore[arg-type]


# ---- the ring ------------------------------------------------------------------------------


def test_ring_hash_is_stable_across_processes() -> None:
    # blake2b, not Python's salted hash(): a key maps to the same server in every process.
    assert ring_hash("system prompt") == ring_hash("system prompt")
    assert ring_hash("a") != ring_hash("b")
    assert 0 <= ring_hash("x") < 2**64


def test_walk_visits_every_server_once_owner_first() -> None:
    ring = HashRing(URLS)
    for key in ("", "k1", "a longer key"):
        order = ring.walk(key)
        assert sorted(order) == sorted(URLS)
        assert order == ring.walk(key)


def test_keys_spread_over_servers() -> None:
    ring = HashRing(URLS, vnodes=64)
    owners = Counter(ring.walk(f"key-{i}")[0] for i in range(3000))
    assert set(owners) == set(URLS)
    assert min(owners.values()) > 3000 / 3 * 0.6


def test_removing_a_server_moves_only_its_keys() -> None:
    full = HashRing(URLS)
    smaller = HashRing(URLS[:2])
    for i in range(500):
        key = f"key-{i}"
        owner = full.walk(key)[0]
        if owner != URLS[2]:
            assert smaller.walk(key)[0] == owner


def test_ring_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        HashRing(["x", "x"])
    with pytest.raises(ValueError):
        HashRing(URLS, vnodes=0)
    assert HashRing([]).walk("k") == []


# ---- routing -------------------------------------------------------------------------------


def test_router_options_are_checked() -> None:
    with pytest.raises(InvalidRequestError, match="at least one"):
        Router([])
    with pytest.raises(InvalidRequestError, match="twice"):
        Router(["x", "x"])
    with pytest.raises(ValueError):
        Router(URLS, load_factor=0.9)
    with pytest.raises(ValueError):
        Router(URLS, cooldown=-1)
    with pytest.raises(ValueError):
        Router(URLS, probe_interval=0)


def test_one_key_sticks_to_its_owner_when_requests_are_sequential() -> None:
    r, _ = router()
    owner = HashRing(URLS).walk("system: you are a pirate")[0]
    for _ in range(20):
        url = r.pick("system: you are a pirate")
        assert url == owner
        r.start(url)
        r.finish(url)
    assert r.state(owner).requests == 20


def test_bounded_load_spills_to_the_next_server_on_the_ring() -> None:
    r, _ = router(load_factor=1.25)
    walk = HashRing(URLS).walk("hot")
    placed = []
    for _ in range(6):
        url = r.pick("hot")
        assert url is not None
        r.start(url)
        placed.append(url)
    # capacity after m requests: ceil(1.25 * (m + 1) / 3): the owner takes the first, the next
    # one clockwise the second, ...: no server is ever over the bound.
    assert placed[0] == walk[0]
    assert placed[1] == walk[1]
    loads = Counter(placed)
    assert max(loads.values()) <= math.ceil(1.25 * 6 / 3)
    # The owner and its successor share the key; the third server stays free for other keys.
    assert loads == {walk[0]: 3, walk[1]: 3}


def test_capacity_formula() -> None:
    r, _ = router(load_factor=2.0)
    assert r.capacity() == math.ceil(2.0 * 1 / 3)
    for url in URLS:
        r.start(url)
        r.start(url)
    assert r.capacity() == math.ceil(2.0 * 7 / 3)


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.sampled_from(["k0", "k1", "k2", "k3", None]), min_size=1, max_size=40),
    load_factor=st.floats(min_value=1.0, max_value=3.0),
)
def test_no_server_exceeds_the_bound(keys: list[str | None], load_factor: float) -> None:
    r, _ = router(load_factor=load_factor)
    for key in keys:
        bound = r.capacity()
        url = r.pick(key)
        assert url is not None
        assert r.state(url).in_flight < bound or key is None
        r.start(url)
    states = r.states()
    total = sum(s.in_flight for s in states)
    assert max(s.in_flight for s in states) <= math.ceil(load_factor * total / 3) + 1


def test_keyless_requests_go_to_the_least_loaded_in_turn() -> None:
    r, _ = router()
    r.start(URLS[0])
    r.start(URLS[0])
    r.start(URLS[1])
    assert r.pick(None) == URLS[2]
    r.start(URLS[2])
    # b and c tie at one; a has two: ties are taken in turn.
    picks = {r.pick(None) for _ in range(4)}
    assert picks == {URLS[1], URLS[2]}


def test_affinity_off_ignores_the_key() -> None:
    r, _ = router(affinity=False)
    seen = set()
    for _ in range(6):
        url = r.pick("same key")
        assert url is not None
        seen.add(url)
    assert seen == set(URLS)


def test_excluded_servers_are_skipped() -> None:
    r, _ = router()
    owner = HashRing(URLS).walk("k")[0]
    url = r.pick("k", exclude={owner})
    assert url is not None and url != owner
    assert r.pick("k", exclude=set(URLS)) is None


def test_when_the_ring_is_full_the_least_loaded_candidate_is_used() -> None:
    r, _ = router(load_factor=1.0)
    walk = HashRing(URLS).walk("k")
    # Load the two non-excluded servers past capacity while the excluded one is idle.
    for _ in range(3):
        r.start(walk[1])
        r.start(walk[2])
    url = r.pick("k", exclude={walk[0]})
    assert url in walk[1:]


# ---- health --------------------------------------------------------------------------------


def test_a_failure_ejects_and_routing_avoids_the_server() -> None:
    r, clock = router()
    owner = HashRing(URLS).walk("k")[0]
    r.start(owner)
    r.fail(owner, "connection refused")
    state = r.state(owner)
    assert state.status == "ejected"
    assert state.in_flight == 0
    assert state.failures == 1 and state.ejections == 1
    assert state.last_error == "connection refused"
    assert state.ejected_until == clock.now + 10.0
    for _ in range(10):
        assert r.pick("k") != owner
    assert owner not in r.healthy()


def test_readmission_needs_the_cooldown_and_a_successful_probe() -> None:
    r, clock = router()
    url = URLS[1]
    r.fail(url, "503 loading model")
    assert url not in r.due_probes()  # cooling down
    r.probe_result(url, True)  # a success during the cooldown does not readmit
    assert r.state(url).status == "ejected"
    clock.now += 10.0
    assert url in r.due_probes()
    r.probe_result(url, True)
    assert r.state(url).status == "healthy"
    assert r.state(url).ejected_until is None
    assert url in r.healthy()


def test_a_failed_probe_restarts_the_cooldown() -> None:
    r, clock = router()
    url = URLS[0]
    r.fail(url, "boom")
    clock.now += 10.0
    r.probe_result(url, False, "connection refused")
    state = r.state(url)
    assert state.status == "ejected" and state.ejections == 1 and state.failures == 2
    assert url not in r.due_probes()
    clock.now += 5.0
    r.probe_result(url, True)
    assert r.state(url).status == "ejected"  # only 5 s into the new cooldown
    clock.now += 5.0
    assert url in r.due_probes()
    r.probe_result(url, True)
    assert r.state(url).status == "healthy"


def test_a_failed_probe_ejects_a_healthy_server() -> None:
    r, _ = router()
    r.probe_result(URLS[2], False)
    assert r.state(URLS[2]).status == "ejected"
    assert r.state(URLS[2]).last_error == "health probe failed"


def test_healthy_servers_are_probed_every_interval() -> None:
    r, clock = router()
    assert r.due_probes() == URLS
    for url in URLS:
        r.probe_result(url, True)
    assert r.due_probes() == []
    clock.now += 1.9
    assert r.due_probes() == []
    clock.now += 0.1
    assert r.due_probes() == URLS


def test_all_ejected_means_no_pick() -> None:
    r, _ = router()
    for url in URLS:
        r.fail(url, "down")
    assert r.pick("k") is None
    assert r.pick(None) is None
    assert r.capacity() == 0


def test_usage_feeds_the_cache_hit_rate() -> None:
    r, _ = router()
    url = URLS[0]
    assert r.state(url).cache_hit_rate is None
    r.start(url)
    r.finish(url, prompt_tokens=100, cached_prompt_tokens=0)
    r.start(url)
    r.finish(url, prompt_tokens=100, cached_prompt_tokens=80)
    state = r.state(url)
    assert state.prompt_tokens == 200 and state.cached_prompt_tokens == 80
    assert state.cache_hit_rate == pytest.approx(0.4)
    assert state.requests == 2 and state.in_flight == 0


def test_finish_never_goes_below_zero() -> None:
    r, _ = router()
    r.finish(URLS[0])
    r.fail(URLS[1], "x")
    assert r.state(URLS[0]).in_flight == 0
    assert r.state(URLS[1]).in_flight == 0
