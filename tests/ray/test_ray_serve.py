"""The `serve` app on Ray Serve: two SmolLM2 replicas behind the ingress, on the session's local
cluster.

Through Serve's HTTP proxy with the openai SDK (a chat, a stream, embeddings); through
`RayEngine` on the same replicas with `ChatLlamaCpp` (a named tool call, a structured answer, a
stream); requests sharing a system prompt answered by one replica (the `x-llamacpp-replica`
header), through OpenAI's chat completions and Responses API and Anthropic's Messages API; and a
replica killed while streams run: each stream ends whole or with the SDK's typed error, and the
deployment answers again once Serve has replaced the replica.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
openai = pytest.importorskip("openai")

from ray import serve  # noqa: E402

from llamacpp_integrations.ray import RayEngine, ServeOptions, serve_application  # noqa: E402
from llamacpp_integrations.ray.serve_app import REPLICA_HEADER  # noqa: E402

APP = f"r2-serve-{uuid.uuid4().hex[:8]}"
SYSTEM = "You are a terse assistant for a hardware store. Answer in one short sentence."
RECOVERY_WAIT_S = 120  # a bound so a broken recovery fails instead of hanging


@pytest.fixture(scope="module")
def base_url(serve_port: int, smollm_path: Path) -> Iterator[str]:
    # One thread per replica: each reserves one of the cluster's two CPUs.
    engine = {"model": str(smollm_path), "n_ctx_per_seq": 1024, "n_seq_max": 2, "n_threads": 1}
    options = ServeOptions(replicas=2, num_cpus=1, health_check_period_s=2.0)
    serve.run(serve_application(engine, options=options), name=APP, route_prefix=f"/{APP}")
    try:
        yield f"http://127.0.0.1:{serve_port}/{APP}/v1"
    finally:
        serve.delete(APP)


@pytest.fixture
def client(base_url: str) -> Any:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)


def _chat(client: Any, question: str, max_tokens: int = 4) -> Any:
    return client.chat.completions.with_raw_response.create(
        model="smollm",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        max_tokens=max_tokens,
        temperature=0,
    )


def test_openai_chat_stream_and_embeddings(client: Any) -> None:
    raw = _chat(client, "Do you sell hammers?", max_tokens=12)
    answer = raw.parse()
    assert answer.choices[0].message.content
    assert answer.usage.completion_tokens > 0
    assert raw.headers.get(REPLICA_HEADER)

    stream = client.chat.completions.create(
        model="smollm",
        messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=8,
        stream=True,
    )
    chunks = list(stream)
    assert chunks[-1].choices[0].finish_reason in {"stop", "length"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    vectors = client.embeddings.create(model="smollm", input=["a nail", "a screw"]).data
    assert len(vectors) == 2 and len(vectors[0].embedding) == len(vectors[1].embedding) > 0


def test_shared_system_prompt_lands_on_one_replica(client: Any, base_url: str) -> None:
    questions = ["Do you sell nails?", "Where are the saws?", "Is there paint?"]
    replicas = {_chat(client, q).headers[REPLICA_HEADER] for q in questions}
    # The Responses API's instructions and Anthropic's system field are the same prefix.
    response = client.responses.with_raw_response.create(
        model="smollm", instructions=SYSTEM, input="Any glue?", max_output_tokens=4
    )
    assert response.parse().output_text is not None
    replicas.add(response.headers[REPLICA_HEADER])
    anthropic = pytest.importorskip("anthropic")
    messages = anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key="unused")
    message = messages.messages.with_raw_response.create(
        model="smollm",
        system=SYSTEM,
        messages=[{"role": "user", "content": "Any rope?"}],
        max_tokens=4,
    )
    assert message.parse().content is not None
    replicas.add(message.headers[REPLICA_HEADER])
    assert len(replicas) == 1
    running = serve.status().applications[APP].deployments["LlamaCppReplica"]
    assert running.replica_states.get("RUNNING") == 2


def test_chat_model_through_ray_engine(base_url: str) -> None:
    from langchain_core.tools import tool
    from pydantic import BaseModel

    from llamacpp_integrations.langchain import ChatLlamaCpp

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    class Item(BaseModel):
        name: str
        price: float

    engine = RayEngine(APP, deployment="LlamaCppReplica")
    llm = ChatLlamaCpp(engine=engine, temperature=0, max_tokens=32)
    called = llm.bind_tools([add], tool_choice="add").invoke("Add 2 and 3.")
    assert called.tool_calls and called.tool_calls[0]["name"] == "add"
    assert set(called.tool_calls[0]["args"]) == {"a", "b"}
    item = llm.with_structured_output(Item).invoke("A hammer costs 12.5 dollars.")
    assert isinstance(item, Item)
    streamed = list(llm.stream("Say hello."))
    assert len(streamed) > 1 and "".join(str(c.content) for c in streamed)


def _replica_actor(replica_id: str) -> Any:
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["name"].endswith(f"#{replica_id}"):
            return ray.get_actor(entry["name"], namespace=entry["namespace"])
    raise LookupError(replica_id)


def test_killed_replica_fails_its_requests_and_is_replaced(client: Any) -> None:
    victim = _chat(client, "Hello?").headers[REPLICA_HEADER]  # the owner of SYSTEM's key
    outcomes: list[str] = []
    first_chunks = threading.Barrier(4, timeout=RECOVERY_WAIT_S)

    def stream_one(n: int) -> None:
        seen = False
        try:
            stream = client.chat.completions.create(
                model="smollm",
                messages=[
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"List {n + 20} tools, one per line."},
                ],
                max_tokens=120,
                stream=True,
            )
            for _ in stream:
                if not seen:
                    seen = True
                    first_chunks.wait()
            outcomes.append("answered")
        except openai.APIError as error:  # the typed ending of a cut stream or a refusal
            outcomes.append(type(error).__name__)
        finally:
            if not seen:
                first_chunks.abort()

    threads = [threading.Thread(target=stream_one, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        first_chunks.wait()  # every stream is under way
    ray.kill(_replica_actor(victim), no_restart=True)
    for thread in threads:
        thread.join(RECOVERY_WAIT_S)
    assert not any(thread.is_alive() for thread in threads)
    assert len(outcomes) == 3
    assert any(outcome != "answered" for outcome in outcomes)

    deadline = time.monotonic() + RECOVERY_WAIT_S
    while True:
        try:
            assert _chat(client, "Are you back?").parse().choices[0].message.content is not None
            break
        except openai.APIError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
