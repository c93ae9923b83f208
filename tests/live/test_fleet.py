"""A fleet of three real llama-servers (SmolLM2, one thread each) behind ``FleetEngine``.

Requests with one system prompt stick to one server, whose prompt cache then serves their
shared prefix; a server killed mid-stream fails that stream with a typed error and nothing is
retried; new requests go elsewhere; the dead server is ejected, and readmitted once it is back
on its port. Needs the llama-server binary (``make llama-server``); skipped without it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llamacpp_integrations.engine.types import ChatRequest, SamplingParams
from llamacpp_integrations.errors import LlamaCppIntegrationError, ServerUnavailableError
from llamacpp_integrations.remote.fleet import FleetEngine
from llamacpp_integrations.remote.routing import ServerState
from tests.live.llama_servers import LlamaServerProcess, llama_server_binary

BINARY = llama_server_binary()
pytestmark = pytest.mark.skipif(
    BINARY is None,
    reason="no llama-server binary: run `make llama-server` "
    "or set LLAMACPP_INTEGRATIONS_LLAMA_SERVER",
)

SYSTEM = (
    "You are a terse assistant for a hardware store. Answer in one short sentence, name the "
    "aisle when you know it, and never invent prices. Aisles: 1 paint, 2 tools, 3 garden, "
    "4 plumbing, 5 electrical, 6 fasteners, 7 lumber."
)
GREEDY = SamplingParams(temperature=0.0)


def ask(
    question: str, *, max_tokens: int = 8, system: str = SYSTEM, ignore_eos: bool = False
) -> ChatRequest:
    return ChatRequest(
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ],
        sampling=GREEDY,
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
    )


def by_url(fleet: FleetEngine) -> dict[str, ServerState]:
    return {state.url: state for state in fleet.servers()}


def wait_for(condition: object, timeout: float = 60.0) -> bool:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def servers(smollm_path: Path) -> Iterator[list[LlamaServerProcess]]:
    assert BINARY is not None
    started: list[LlamaServerProcess] = []
    try:
        for _ in range(3):
            started.append(LlamaServerProcess(BINARY, smollm_path, threads=1, slots=2).start())
        yield started
    finally:
        for server in started:
            server.close()


@pytest.fixture
def fleet(servers: list[LlamaServerProcess]) -> Iterator[FleetEngine]:
    with FleetEngine(
        [server.url for server in servers], probe_interval=0.5, cooldown=1.0
    ) as engine:
        yield engine


def test_one_system_prompt_sticks_to_one_server_and_hits_its_cache(fleet: FleetEngine) -> None:
    questions = ["Where is the paint?", "Where are hammers?", "Where is mulch?", "Any bolts?"]
    completions = [fleet.generate(ask(q)) for q in questions]
    used = [s for s in fleet.servers() if s.requests]
    assert len(used) == 1
    assert used[0].requests == len(questions)
    assert used[0].url == fleet.route(ask("anything"))
    # The first request filled the slot's cache; every later one reuses the shared prefix.
    cached = [c.usage.cached_prompt_tokens for c in completions]
    system_tokens = len(fleet.tokenize(SYSTEM))
    assert all(n >= system_tokens for n in cached[1:]), cached
    assert used[0].cached_prompt_tokens == sum(cached)
    assert fleet.stats().cache_hit_rate is not None


def read_until_failure(
    fleet: FleetEngine, request: ChatRequest, on_first: Callable[[], None], *, use_async: bool
) -> tuple[list[str], BaseException | None]:
    """The stream's texts, calling ``on_first`` after the first one, and how it ended."""
    received: list[str] = []

    def take(text: str) -> None:
        received.append(text)
        if len(received) == 1:
            on_first()

    async def read_async() -> None:
        async for chunk in fleet.astream(request):
            take(chunk.text)

    try:
        if use_async:
            asyncio.run(read_async())
        else:
            for chunk in fleet.stream(request):
                take(chunk.text)
    except LlamaCppIntegrationError as error:
        return received, error
    return received, None


@pytest.mark.parametrize("use_async", [False, True], ids=["stream", "astream"])
def test_a_killed_server_fails_its_stream_is_ejected_and_readmitted(
    fleet: FleetEngine, servers: list[LlamaServerProcess], use_async: bool
) -> None:
    # ignore_eos: the stream runs to max_tokens, well past the kill.
    request = ask("Describe every aisle in detail.", max_tokens=400, ignore_eos=True)
    owner = fleet.route(request)
    assert owner is not None
    process = next(s for s in servers if s.url == owner)
    before = {url: s.requests for url, s in by_url(fleet).items()}

    # Kill the owner once the stream has delivered text: the caller gets a typed error, and
    # no other server is asked to take the request over.
    received, error = read_until_failure(fleet, request, process.kill, use_async=use_async)
    assert received, "the stream delivered nothing before the kill"
    assert isinstance(error, ServerUnavailableError), error
    assert not error.retryable
    after = by_url(fleet)
    assert {url: s.requests for url, s in after.items()} == {
        url: n + (url == owner) for url, n in before.items()
    }
    assert after[owner].status == "ejected"
    assert after[owner].in_flight == 0

    # New requests with the same system prompt go to another server and succeed.
    completion = fleet.generate(ask("Where is the paint?"))
    assert completion.finish_reason in ("stop", "length")
    assert fleet.route(ask("Where is the paint?")) != owner
    assert by_url(fleet)[owner].requests == after[owner].requests

    # Back on its port: a probe after the cooldown readmits it, and its keys come home.
    process.start()
    assert wait_for(lambda: by_url(fleet)[owner].status == "healthy"), by_url(fleet)[owner]
    assert fleet.route(ask("Where is the paint?")) == owner
    fleet.generate(ask("Where is the paint?"))
    assert by_url(fleet)[owner].requests == after[owner].requests + 1


def test_a_dead_server_found_before_the_first_token_is_retried_elsewhere(
    servers: list[LlamaServerProcess],
) -> None:
    # Probes rarely: the router still thinks the killed server is healthy when the request
    # comes, so the request itself finds it dead (connection refused) and moves on.
    with FleetEngine([s.url for s in servers], probe_interval=3600, cooldown=3600) as fleet:
        request = ask("Where are the shovels?", system="A different prompt: answer tersely.")
        owner = fleet.route(request)
        assert owner is not None
        process = next(s for s in servers if s.url == owner)
        process.kill()
        try:
            chunks = list(fleet.stream(request))
            assert chunks[-1].finish_reason in ("stop", "length")
            states = by_url(fleet)
            assert states[owner].status == "ejected"
            assert states[owner].failures == 1
            assert sum(s.requests for s in states.values()) == 2  # the refused try, the retry
        finally:
            process.start()


def test_adapters_take_a_list_of_urls_as_a_fleet(servers: list[LlamaServerProcess]) -> None:
    from llamacpp_integrations.langchain import ChatLlamaCpp

    llm = ChatLlamaCpp(base_url=[s.url for s in servers], temperature=0, max_tokens=8)
    message = llm.invoke([("system", SYSTEM), ("user", "Where is the paint?")])
    assert message.usage_metadata is not None
    assert message.usage_metadata["output_tokens"] >= 1
    engine = llm.binding.get()
    assert isinstance(engine, FleetEngine)
    assert sum(s.requests for s in engine.servers()) == 1
