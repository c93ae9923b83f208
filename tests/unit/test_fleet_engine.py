"""``FleetEngine`` over scripted servers (``testing.ScriptedServer``): routing by affinity key,
retries only before the first chunk, ejection and readmission, stats. The live fleet test runs
real llama-servers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field

import pytest

from llamacpp_integrations.engine.results import Completion, StreamChunk, Timings, Usage
from llamacpp_integrations.engine.types import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    GenerationRequest,
)
from llamacpp_integrations.errors import (
    EngineClosedError,
    RequestCancelledError,
    ServerUnavailableError,
)
from llamacpp_integrations.prompts.media import ImageInput
from llamacpp_integrations.remote.affinity import PREFIX_CHARS, affinity_key
from llamacpp_integrations.remote.fleet import FleetEngine, MemberEngine
from llamacpp_integrations.testing import ScriptedEngine, ScriptedServer

URLS = ["http://a:1", "http://b:2", "http://c:3"]
TIMINGS = Timings(0.0, 0.0, 0.0, 0.0, 0.0)


def server(url: str) -> ScriptedServer:
    """A server whose answers name it: ``url#0 url#1 url#2``, 10 prompt tokens, 8 cached."""
    return ScriptedServer(
        url=url,
        script=tuple(f"{url}#{i} " for i in range(3)),
        prompt_tokens=10,
        cached_prompt_tokens=8,
        timings=TIMINGS,
        media_marker="<__media__>",
    )


@pytest.fixture
def members() -> dict[str, ScriptedServer]:
    return {url: server(url) for url in URLS}


@pytest.fixture
def fleet(members: dict[str, ScriptedServer]) -> Generator[FleetEngine, None, None]:
    # A long probe interval: the background prober stays out of these tests' way.
    engine = FleetEngine.from_engines(members, probe_interval=3600, cooldown=0.0)
    yield engine
    engine.close()


def chat(system: str, user: str = "hi") -> ChatRequest:
    return ChatRequest(
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        max_tokens=4,
    )


def test_a_scripted_server_is_a_member() -> None:
    assert isinstance(server("x"), MemberEngine)


def test_fleet_is_an_inference_engine(fleet: FleetEngine) -> None:
    from llamacpp_integrations.engine.interface import InferenceEngine

    assert isinstance(fleet, InferenceEngine)


# ---- affinity keys -------------------------------------------------------------------------


def test_chat_key_is_the_system_messages_and_tools() -> None:
    a = affinity_key(chat("be brief", "question one"))
    b = affinity_key(chat("be brief", "question two"))
    c = affinity_key(chat("be verbose", "question one"))
    assert a == b != c
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    with_tools = ChatRequest(messages=chat("be brief").messages, tools=tools)
    assert affinity_key(with_tools) != a
    typed = ChatRequest(
        messages=[ChatMessage(role="system", content="be brief"), ChatMessage(role="user")]
    )
    assert affinity_key(typed) == a


def test_only_leading_system_messages_count() -> None:
    one = ChatRequest(
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "late system message"},
        ]
    )
    two = ChatRequest(messages=[{"role": "user", "content": "other"}])
    assert affinity_key(one) == affinity_key(two)


def test_images_in_system_messages_key_by_their_pixels() -> None:
    def with_image(rgb: bytes) -> ChatRequest:
        part = {"type": "image", "image": ImageInput(1, 1, rgb)}
        return ChatRequest(messages=[{"role": "system", "content": [part]}])

    assert affinity_key(with_image(b"abc")) == affinity_key(with_image(b"abc"))
    assert affinity_key(with_image(b"abc")) != affinity_key(with_image(b"abd"))


def test_completion_key_is_a_prompt_prefix() -> None:
    shared = "x" * PREFIX_CHARS
    assert affinity_key(CompletionRequest(prompt=shared + "a")) == affinity_key(
        CompletionRequest(prompt=shared + "b")
    )
    assert affinity_key(CompletionRequest(prompt="a")) != affinity_key(
        CompletionRequest(prompt="b")
    )
    assert affinity_key(CompletionRequest(prompt=[1, 2, 3])) == "tokens:1,2,3"
    assert affinity_key(GenerationRequest()) is None


# ---- routing and retries -------------------------------------------------------------------


def test_one_system_prompt_sticks_to_one_server(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    for i in range(6):
        fleet.generate(chat("shared system prompt", f"question {i}"))
    calls = sorted(len(m.requests) for m in members.values())
    assert calls == [0, 0, 6]
    owner = fleet.route(chat("shared system prompt"))
    state = {s.url: s for s in fleet.servers()}[owner]  # type: ignore[index]
    assert state.requests == 6 and state.in_flight == 0
    assert state.prompt_tokens == 60 and state.cached_prompt_tokens == 48
    assert fleet.stats().cache_hit_rate == pytest.approx(0.8)


def test_affinity_off_spreads_requests(members: dict[str, ScriptedServer]) -> None:
    engine = FleetEngine.from_engines(members, probe_interval=3600, affinity=False)
    try:
        for i in range(6):
            engine.generate(chat("shared system prompt", f"question {i}"))
        assert sorted(len(m.requests) for m in members.values()) == [2, 2, 2]
    finally:
        engine.close()


def test_refused_before_the_first_chunk_is_retried_elsewhere(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    request = chat("sys")
    owner = fleet.route(request)
    assert owner is not None
    members[owner].down = True
    chunks = list(fleet.stream(request))
    assert chunks[-1].finish_reason == "stop"
    assert owner not in chunks[0].text
    states = {s.url: s for s in fleet.servers()}
    assert states[owner].status == "ejected"
    assert states[owner].failures == 1
    assert sum(s.in_flight for s in states.values()) == 0
    # New requests with the same key go elsewhere while it is out.
    assert fleet.route(request) != owner


def test_a_failure_after_the_first_chunk_is_not_retried(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    request = chat("sys")
    owner = fleet.route(request)
    assert owner is not None
    members[owner].die_after = 1
    seen: list[str] = []
    with pytest.raises(ServerUnavailableError) as caught:
        for chunk in fleet.stream(request):
            seen.append(chunk.text)
    assert not caught.value.retryable
    assert seen == [f"{owner}#0 "]
    assert sum(len(m.requests) for m in members.values()) == 1  # nobody else was asked
    assert {s.url: s.status for s in fleet.servers()}[owner] == "ejected"


def test_a_failure_after_the_first_chunk_is_not_retried_async(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    request = chat("sys")
    owner = fleet.route(request)
    assert owner is not None
    members[owner].die_after = 2

    async def run() -> list[str]:
        seen = []
        async for chunk in fleet.astream(request):
            seen.append(chunk.text)
        return seen

    with pytest.raises(ServerUnavailableError):
        asyncio.run(run())
    assert sum(len(m.requests) for m in members.values()) == 1


def test_async_paths_retry_before_the_first_chunk(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    request = chat("sys")
    owner = fleet.route(request)
    assert owner is not None
    members[owner].down = True

    async def run() -> tuple[list[StreamChunk], Completion]:
        chunks = [c async for c in fleet.astream(request)]
        return chunks, await fleet.agenerate(chat("sys"))

    chunks, completion = asyncio.run(run())
    assert chunks[-1].finish_reason == "stop"
    assert owner not in completion.text
    assert sum(s.in_flight for s in fleet.servers()) == 0


def test_generate_retries_a_refusal(fleet: FleetEngine, members: dict[str, ScriptedServer]) -> None:
    request = chat("sys")
    owner = fleet.route(request)
    assert owner is not None
    members[owner].down = True
    assert owner not in fleet.generate(request).text


def test_a_refused_api_key_ends_the_request_and_ejects_nobody(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    request = chat("sys")
    owner = fleet.route(request)
    assert owner is not None

    def refused(_: GenerationRequest) -> Generator[StreamChunk, None, None]:
        raise ServerUnavailableError("refused the API key (401)", url=owner, retryable=False)
        yield

    members[owner].stream = refused  # type: ignore[method-assign,assignment]
    with pytest.raises(ServerUnavailableError, match="API key"):
        fleet.generate(request)
    assert all(s.status == "healthy" and s.in_flight == 0 for s in fleet.servers())
    assert sum(len(m.requests) for m in members.values()) == 0


def test_generate_keeps_every_part_of_the_answer(fleet: FleetEngine) -> None:
    completion = fleet.generate(chat("sys"))
    assert completion.finish_reason == "stop"
    assert completion.usage == Usage(10, 3, 8)
    assert completion.logprobs is None
    assert completion.text.count("#") == 3


def test_a_broken_off_answer_ejects_its_server_in_generate_too(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    request = chat("sys")
    owner = fleet.route(request)
    assert owner is not None
    members[owner].die_after = 1
    with pytest.raises(ServerUnavailableError):
        fleet.generate(request)
    assert {s.url: s.status for s in fleet.servers()}[owner] == "ejected"
    assert sum(len(m.requests) for m in members.values()) == 1


def test_every_server_down_is_a_typed_error(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    for member in members.values():
        member.down = True
    with pytest.raises(ServerUnavailableError) as caught:
        list(fleet.stream(chat("sys")))
    assert caught.value.retryable
    assert all(s.status == "ejected" for s in fleet.servers())
    with pytest.raises(ServerUnavailableError, match="no server is healthy"):
        fleet.generate(chat("sys"))


def test_ejected_servers_come_back_after_the_cooldown(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    request = chat("sys")
    owner = fleet.route(request)
    assert owner is not None
    members[owner].down = True
    fleet.generate(request)
    assert fleet.route(request) != owner
    members[owner].down = False
    assert fleet.health()  # cooldown 0: a successful probe readmits at once
    assert fleet.route(request) == owner
    assert fleet.generate(request).text.startswith(owner)


def test_when_all_are_ejected_a_request_probes_before_failing(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    for member in members.values():
        member.down = True
    with pytest.raises(ServerUnavailableError):
        fleet.generate(chat("sys"))
    for member in members.values():
        member.down = False
    assert fleet.generate(chat("sys")).finish_reason == "stop"


def test_leaving_a_stream_early_releases_the_server(fleet: FleetEngine) -> None:
    stream = fleet.stream(chat("sys"))
    next(stream)
    assert sum(s.in_flight for s in fleet.servers()) == 1
    stream.close()
    assert sum(s.in_flight for s in fleet.servers()) == 0
    assert all(s.status == "healthy" for s in fleet.servers())


def test_request_errors_do_not_eject(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    request = chat("sys")
    owner = fleet.route(request)
    assert owner is not None

    def cancelled(_: GenerationRequest) -> Generator[StreamChunk, None, None]:
        raise RequestCancelledError("cancelled")
        yield  # a generator, as stream is

    members[owner].stream = cancelled  # type: ignore[method-assign,assignment]
    with pytest.raises(RequestCancelledError):
        fleet.generate(request)
    assert all(s.status == "healthy" and s.in_flight == 0 for s in fleet.servers())


# ---- delegated calls -----------------------------------------------------------------------


def test_other_calls_go_to_a_healthy_server(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    members[URLS[0]].down = True
    assert fleet.detokenize([104, 105]) == "hi"
    assert {s.url: s.status for s in fleet.servers()}[URLS[0]] == "ejected"
    assert fleet.tokenize("abc") == [97, 98, 99]
    rendered = fleet.render_chat(chat("s"))
    assert fleet.count_prompt_tokens(chat("s")) == len(rendered)  # a token a character
    assert len(fleet.embed(["a", "b"])) == 2
    assert len(asyncio.run(fleet.aembed(["a"]))) == 1
    answered = members[URLS[1]]
    assert answered.tokenized == ["abc"] and len(answered.rendered) == 1
    assert [texts for texts, _ in answered.embedded] == [["a", "b"], ["a"]]
    assert fleet.info.path == URLS[1]
    assert fleet.media_marker == "<__media__>"
    # None of these is a routed request: loads and request counts stay as they were.
    assert all(s.requests == 0 and s.in_flight == 0 for s in fleet.servers())


def test_an_error_about_another_server_ejects_nobody(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    def embeddings_down(texts: Sequence[str], **_: object) -> list[list[float]]:
        raise ServerUnavailableError("refused", url="http://embeddings:9")

    members[URLS[0]].embed = embeddings_down  # type: ignore[method-assign]
    with pytest.raises(ServerUnavailableError, match="embeddings"):
        fleet.embed(["a"])
    assert all(s.status == "healthy" for s in fleet.servers())


def test_close_stops_probes_and_closes_members(members: dict[str, ScriptedServer]) -> None:
    engine = FleetEngine.from_engines(members, probe_interval=0.05)
    engine.close()
    assert engine.closed
    assert all(m.closed for m in members.values())
    assert not engine._prober.is_alive()
    with pytest.raises(EngineClosedError):
        engine.generate(chat("s"))


def test_background_probes_readmit(members: dict[str, ScriptedServer]) -> None:
    import time

    engine = FleetEngine.from_engines(members, probe_interval=0.05, cooldown=0.05)
    try:
        members[URLS[0]].down = True
        # The prober ejects it; once it answers again the prober readmits it.
        for _ in range(200):
            if {s.url: s.status for s in engine.servers()}[URLS[0]] == "ejected":
                break
            time.sleep(0.02)
        assert {s.url: s.status for s in engine.servers()}[URLS[0]] == "ejected"
        members[URLS[0]].down = False
        for _ in range(200):
            if {s.url: s.status for s in engine.servers()}[URLS[0]] == "healthy":
                break
            time.sleep(0.02)
        assert {s.url: s.status for s in engine.servers()}[URLS[0]] == "healthy"
    finally:
        engine.close()


# ---- background probes run at once --------------------------------------------------------


@dataclass
class HungProbe:
    """A server's ``on_probe`` that holds every probe until ``release`` is set, counting
    them and how many ran at once."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    probes: int = 0
    active: int = 0
    most_active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self) -> None:
        with self.lock:
            self.probes += 1
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        self.entered.set()
        try:
            self.release.wait()
        finally:
            with self.lock:
                self.active -= 1


def hung_server(url: str) -> tuple[ScriptedServer, HungProbe]:
    """A server whose ``/health`` hangs until its probe's ``release`` is set."""
    probe = HungProbe()
    return ScriptedServer(url=url, on_probe=probe), probe


def wait_for(condition: Callable[[], bool]) -> bool:
    """Poll ``condition`` until it holds, with a deadline far beyond any busy machine's delay."""
    for _ in range(3000):
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def status(engine: FleetEngine, url: str) -> str:
    return {s.url: s.status for s in engine.servers()}[url]


def test_a_hung_probe_does_not_hold_back_the_others() -> None:
    held, hung = hung_server(URLS[0])
    other = ScriptedServer(url=URLS[1])
    engine = FleetEngine.from_engines(
        {held.url: held, other.url: other}, probe_interval=0.05, cooldown=0.05
    )
    try:
        assert hung.entered.wait(30)
        other.down = True
        # The prober ejects the other server while the first one's probe still hangs.
        assert wait_for(lambda: status(engine, other.url) == "ejected")
        assert not hung.release.is_set() and hung.active == 1
        other.down = False
        assert wait_for(lambda: status(engine, other.url) == "healthy")
        assert hung.active == 1
    finally:
        hung.release.set()
        engine.close()


def test_closing_while_a_probe_hangs_returns_and_ends_the_prober() -> None:
    held, hung = hung_server(URLS[0])
    other = ScriptedServer(url=URLS[1])
    engine = FleetEngine.from_engines({held.url: held, other.url: other}, probe_interval=0.05)
    closed = threading.Event()

    def close() -> None:
        engine.close()
        closed.set()

    try:
        assert hung.entered.wait(30)
        threading.Thread(target=close, daemon=True).start()
        assert closed.wait(30)  # close does not wait for the hung probe
        assert hung.active == 1
        engine._prober.join(30)
        assert not engine._prober.is_alive()
        assert held.closed and other.closed
    finally:
        hung.release.set()
        engine.close()


def test_a_server_is_not_probed_again_while_its_probe_runs() -> None:
    held, hung = hung_server(URLS[0])
    other = ScriptedServer(url=URLS[1])
    engine = FleetEngine.from_engines({held.url: held, other.url: other}, probe_interval=0.05)
    try:
        assert hung.entered.wait(30)
        # The hung server stays due (no result came back), tick after tick; the other one
        # was probed several times meanwhile.
        assert wait_for(lambda: other.probes >= 5)
        assert engine._prober.running == {held.url}
        assert hung.probes == 1 and hung.most_active == 1
    finally:
        hung.release.set()
        engine.close()


def test_once_a_hung_probe_answers_its_server_is_probed_again() -> None:
    held, hung = hung_server(URLS[0])
    engine = FleetEngine.from_engines({held.url: held}, probe_interval=0.05)
    try:
        assert hung.entered.wait(30)
        hung.release.set()
        assert wait_for(lambda: hung.probes >= 2)
        assert hung.most_active == 1
    finally:
        hung.release.set()
        engine.close()


def test_an_unreferenced_fleet_is_collected_and_stops_its_prober(
    members: dict[str, ScriptedServer],
) -> None:
    import gc

    engine = FleetEngine.from_engines(members, probe_interval=0.05)
    prober = engine._prober
    del engine
    gc.collect()
    assert all(m.closed for m in members.values())
    prober.join(30)
    assert not prober.is_alive()


def test_async_health_probes_every_server(
    fleet: FleetEngine, members: dict[str, ScriptedServer]
) -> None:
    members[URLS[1]].down = True
    assert asyncio.run(fleet.ahealth())
    statuses = {s.url: s.status for s in fleet.servers()}
    assert statuses == {URLS[0]: "healthy", URLS[1]: "ejected", URLS[2]: "healthy"}


def test_sync_health_probes_every_server_at_once() -> None:
    meeting = threading.Barrier(len(URLS), timeout=30)
    # Each probe answers only once every server's probe is running (the barrier breaks,
    # BrokenBarrierError, if they run one at a time).
    members = {url: ScriptedServer(url=url, on_probe=meeting.wait) for url in URLS}
    members[URLS[1]].down = True
    engine = FleetEngine.from_engines(members, probe_interval=3600)
    try:
        assert engine.health()
        statuses = {s.url: s.status for s in engine.servers()}
        assert statuses == {URLS[0]: "healthy", URLS[1]: "ejected", URLS[2]: "healthy"}
    finally:
        engine.close()


@pytest.mark.parametrize("call", ["aembed", "astream"])
def test_when_all_are_ejected_an_async_call_probes_on_the_event_loop(call: str) -> None:
    # The probes before an async call are the async ones: a sync probe would block the loop.
    members = {url: server(url) for url in URLS}
    engine = FleetEngine.from_engines(members, probe_interval=3600, cooldown=0.0)
    try:
        for member in members.values():
            member.down = True
        with pytest.raises(ServerUnavailableError):
            engine.embed(["a"])
        assert all(s.status == "ejected" for s in engine.servers())
        for member in members.values():
            member.down = False

        async def run() -> object:
            if call == "aembed":
                return await engine.aembed(["a"])
            return [chunk async for chunk in engine.astream(chat("sys"))][-1].finish_reason

        assert asyncio.run(run()) in (ScriptedEngine().embed(["a"]), "stop")  # same vectors
        assert all(m.async_probes == 1 for m in members.values())
    finally:
        engine.close()
