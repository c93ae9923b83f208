"""Cassettes without a model: a ScriptedEngine recorded by a RecordingEngine, replayed by a
ReplayEngine under the real adapters. Record modes, matching options, unmatched requests,
typed errors, capabilities, corrupt and old cassettes, and several tasks on one cassette."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    RerankingEngine,
    SamplingParams,
    TokenPieceEngine,
)
from llamacpp_integrations.errors import (
    CassetteError,
    CassetteFormatError,
    ContextOverflowError,
    EngineClosedError,
    OutputTruncatedError,
    RequestTimeoutError,
    UnmatchedRequestError,
)
from llamacpp_integrations.langchain import ChatLlamaCpp, LlamaCppEmbeddings
from llamacpp_integrations.testing import (
    CASSETTE_VERSION,
    SCRIPTED_INFO,
    Answer,
    Cassette,
    EngineRecord,
    Interaction,
    MatchOptions,
    RecordingEngine,
    ReplayEngine,
    ScriptedEngine,
    ScriptedRerankingEngine,
    ScriptedTokenPieceEngine,
    generation_fingerprint,
)
from llamacpp_integrations.testing.cassette import MIGRATIONS

GREEDY = SamplingParams(temperature=0.0)
WEATHER_CALL = Answer.calling(("get_weather", {"city": "Oslo"}))
ANSWER = Answer(pieces=[("Look up.", ""), ("", "Sunny"), ("", " in Oslo.")])


def _chat(text: str, **fields: Any) -> ChatRequest:
    fields.setdefault("sampling", GREEDY)
    return ChatRequest(messages=[ChatMessage(role="user", content=text)], **fields)


def _chunks(engine: Any, request: ChatRequest) -> list[tuple[str, str, str | None]]:
    return [(c.reasoning, c.text, c.finish_reason) for c in engine.stream(request)]


def _record(path: Path, *requests: ChatRequest, **scripted: Any) -> ScriptedEngine:
    real = ScriptedEngine(**scripted)
    recorder = RecordingEngine(real, path)
    for request in requests:
        list(recorder.stream(request))
    return real


# ---- record and replay -----------------------------------------------------------------------


def test_a_stream_replays_with_its_chunks_usage_and_a_new_request_id(tmp_path: Path) -> None:
    path = tmp_path / "chat.llamacpp.jsonl"
    real = ScriptedEngine(answers=[ANSWER], cached_prompt_tokens=2)
    recorded = list(RecordingEngine(real, path).stream(_chat("Weather?", logprobs=0)))
    request = _chat("Weather?", logprobs=0)
    replayed = list(ReplayEngine(path).stream(request))
    assert [replace(c, request_id="x") for c in replayed] == [
        replace(c, request_id="x") for c in recorded
    ]
    assert {c.request_id for c in replayed} == {request.request_id}
    assert replayed[-1].usage is not None and replayed[-1].usage.cached_prompt_tokens == 2
    header, line = (json.loads(text) for text in path.read_text().splitlines())
    assert header["version"] == CASSETTE_VERSION and header["engine"]["info"]["name"] == "Scripted"
    assert line["kind"] == "stream" and "request_id" not in json.dumps(line)


def test_a_langchain_tool_call_and_answer_replay_the_same(tmp_path: Path) -> None:
    path = tmp_path / "agent.llamacpp.jsonl"

    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    def run(engine: Any) -> list[Any]:
        llm = ChatLlamaCpp(engine=engine, temperature=0).bind_tools([get_weather])
        chunks = list(llm.stream("Weather in Oslo?"))
        return [(c.content, c.tool_call_chunks, c.additional_kwargs) for c in chunks], sum(
            chunks[1:], chunks[0]
        )

    scripted = ScriptedEngine(answers=[WEATHER_CALL])
    recorded_chunks, recorded = run(RecordingEngine(scripted, path))
    replayed_chunks, replayed = run(ReplayEngine(path))
    assert isinstance(replayed, AIMessageChunk)
    assert [call["name"] for call in replayed.tool_calls] == ["get_weather"]
    assert replayed.tool_calls[0]["args"] == recorded.tool_calls[0]["args"] == {"city": "Oslo"}
    strip = [(text, [{**c, "id": None} for c in calls], kw) for text, calls, kw in recorded_chunks]
    again = [(text, [{**c, "id": None} for c in calls], kw) for text, calls, kw in replayed_chunks]
    assert again == strip


def test_embeddings_tokens_and_counts_replay(tmp_path: Path) -> None:
    path = tmp_path / "calls.llamacpp.jsonl"
    recorder = RecordingEngine(ScriptedEngine(), path)
    vectors = LlamaCppEmbeddings(engine=recorder).embed_documents(["a", "b"])
    tokens = recorder.tokenize("Hello")
    text = recorder.detokenize(tokens)
    count = recorder.count_prompt_tokens(_chat("Hi"))
    replay = ReplayEngine(path)
    assert LlamaCppEmbeddings(engine=replay).embed_documents(["a", "b"]) == vectors
    assert replay.tokenize("Hello") == tokens and replay.detokenize(tokens) == text
    assert replay.count_prompt_tokens(_chat("Hi")) == count
    assert replay.tokenize("Hello") == tokens  # not used up: the same answer every time


async def test_async_generate_and_stream_replay(tmp_path: Path) -> None:
    path = tmp_path / "async.llamacpp.jsonl"
    recorder = RecordingEngine(ScriptedEngine(answers=[ANSWER]), path)
    whole = await recorder.agenerate(_chat("One"))
    pieces = [c.text async for c in recorder.astream(_chat("Two"))]
    replay = ReplayEngine(path)
    again = await replay.agenerate(_chat("One"))
    assert (again.text, again.reasoning, again.usage) == (whole.text, whole.reasoning, whole.usage)
    assert [c.text async for c in replay.astream(_chat("Two"))] == pieces


def test_chats_render_offline_from_the_recorded_template(tmp_path: Path) -> None:
    path = tmp_path / "render.llamacpp.jsonl"
    real = _record(path, _chat("Hi"))
    replay = ReplayEngine(path)
    assert replay.render_chat(_chat("Never recorded")) == real.render_chat(_chat("Never recorded"))


# ---- typed errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        ContextOverflowError("too long", n_prompt_tokens=900, n_ctx=512),
        RequestTimeoutError("ran past 1 s", partial_text="Sun"),
        OutputTruncatedError("cut at max_tokens", partial_text='{"a": '),
    ],
    ids=lambda error: type(error).__name__,
)
def test_recorded_errors_replay_as_the_same_type_and_attributes(
    tmp_path: Path, error: Exception
) -> None:
    path = tmp_path / "errors.llamacpp.jsonl"
    recorder = RecordingEngine(ScriptedEngine(answers=[Answer(fail_at=1, error=error)]), path)  # type: ignore[arg-type]
    with pytest.raises(type(error)) as recorded:
        list(recorder.stream(_chat("Hi")))
    request = _chat("Hi")
    got: list[str] = []
    with pytest.raises(type(error)) as replayed:
        got.extend(chunk.text for chunk in ReplayEngine(path).stream(request))
    assert got == ["Hello"]  # the chunk before the error
    assert str(replayed.value) == str(recorded.value)
    same = {k: v for k, v in vars(recorded.value).items() if k != "request_id"}
    assert {k: v for k, v in vars(replayed.value).items() if k != "request_id"} == same
    assert replayed.value.request_id == request.request_id  # type: ignore[attr-defined]


def test_a_stream_left_early_replays_up_to_there(tmp_path: Path) -> None:
    path = tmp_path / "early.llamacpp.jsonl"
    stream = RecordingEngine(ScriptedEngine(answers=[ANSWER]), path).stream(_chat("Hi"))
    first = next(stream)
    stream.close()
    replayed = ReplayEngine(path).stream(_chat("Hi"))
    assert next(replayed).reasoning == first.reasoning
    with pytest.raises(CassetteError, match="closed by its reader after 1 chunk"):
        next(replayed)


# ---- matching --------------------------------------------------------------------------------


def test_an_unrecorded_request_names_the_nearest_and_the_difference(tmp_path: Path) -> None:
    path = tmp_path / "near.llamacpp.jsonl"
    _record(path, _chat("What is 6 times 7?", max_tokens=16), _chat("Name a colour."))
    with pytest.raises(UnmatchedRequestError) as caught:
        list(ReplayEngine(path).stream(_chat("What is 6 times 8?", max_tokens=16)))
    message = str(caught.value)
    assert "call 1 of the cassette (line 2)" in message
    assert "prompt.chat.messages.0.content" in message
    assert '"What is 6 times 7?" -> "What is 6 times 8?"' in message
    assert "max_tokens" not in message  # only what differs
    assert caught.value.nearest is not None and caught.value.kind == "stream"


def test_an_unrecorded_kind_says_what_the_cassette_holds(tmp_path: Path) -> None:
    path = tmp_path / "kinds.llamacpp.jsonl"
    _record(path, _chat("Hi"))
    with pytest.raises(UnmatchedRequestError, match=r"none of that kind .*stream"):
        ReplayEngine(path).embed(["text"])


def test_identical_requests_replay_in_order_then_fail_unless_repeats(tmp_path: Path) -> None:
    path = tmp_path / "repeat.llamacpp.jsonl"
    answers = [Answer(pieces=["first"]), Answer(pieces=["second"])]
    _record(path, _chat("Hi"), _chat("Hi"), answers=answers)
    replay = ReplayEngine(path)
    assert [_chunks(replay, _chat("Hi"))[0][1] for _ in range(2)] == ["first", "second"]
    with pytest.raises(UnmatchedRequestError, match="replayed already"):
        _chunks(replay, _chat("Hi"))
    repeating = ReplayEngine(path, match=MatchOptions(allow_repeats=True))
    assert [_chunks(repeating, _chat("Hi"))[0][1] for _ in range(3)] == [
        "first",
        "second",
        "second",
    ]


def test_seed_sampling_fields_and_order_can_be_ignored(tmp_path: Path) -> None:
    path = tmp_path / "loose.llamacpp.jsonl"
    seeded = replace(GREEDY, seed=1)
    _record(path, _chat("Hi", sampling=seeded))
    reseeded = _chat("Hi", sampling=replace(GREEDY, seed=2))
    with pytest.raises(UnmatchedRequestError, match=r"sampling\.seed: 1 -> 2"):
        _chunks(ReplayEngine(path), reseeded)
    assert _chunks(ReplayEngine(path, match=MatchOptions(ignore_seed=True)), reseeded)
    hot = _chat("Hi", sampling=SamplingParams(temperature=0.9, seed=5))
    assert _chunks(ReplayEngine(path, match=MatchOptions(ignore_sampling=True)), hot)
    longer = _chat("Hi", sampling=seeded, max_tokens=9)
    assert _chunks(ReplayEngine(path, match=MatchOptions(ignore=("max_tokens",))), longer)
    other = _chat("Today is a new day", sampling=seeded)
    assert _chunks(ReplayEngine(path, match=MatchOptions(in_order=True)), other)


def test_generated_tool_call_ids_do_not_change_the_fingerprint() -> None:
    def turn(call_id: str) -> ChatRequest:
        call = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        return ChatRequest(
            messages=[
                ChatMessage(role="user", content="Go"),
                ChatMessage(role="assistant", tool_calls=[call]),
                ChatMessage(role="tool", content="done", tool_call_id=call_id),
            ]
        )

    first, second = turn("call_" + "a" * 24), turn("call_" + "b" * 24)
    assert generation_fingerprint(first) == generation_fingerprint(second)
    assert generation_fingerprint(first) != generation_fingerprint(turn("user-chosen-id"))


def test_completion_prompts_and_image_bytes_fingerprint_by_content() -> None:
    by_text = generation_fingerprint(CompletionRequest(prompt="Once upon"))
    by_ids = generation_fingerprint(CompletionRequest(prompt=[1, 2, 3]))
    assert by_text["prompt"]["completion"]["text"] == "Once upon"
    assert by_ids["prompt"]["completion"]["token_ids"] == [1, 2, 3]
    assert "timeout" not in by_text and "request_id" not in by_text


# ---- record modes ----------------------------------------------------------------------------


def test_new_episodes_replays_what_matches_and_appends_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "episodes.llamacpp.jsonl"
    _record(path, _chat("One"))
    real = ScriptedEngine()
    recorder = RecordingEngine(real, path, mode="new_episodes")
    _chunks(recorder, _chat("One"))
    _chunks(recorder, _chat("Two"))
    assert len(real.requests) == 1 and real.requests[0].messages[0].content == "Two"  # type: ignore[attr-defined]
    assert len(path.read_text().splitlines()) == 3
    assert _chunks(ReplayEngine(path), _chat("Two"))


def test_all_overwrites_and_once_refuses_an_existing_cassette(tmp_path: Path) -> None:
    path = tmp_path / "modes.llamacpp.jsonl"
    _record(path, _chat("One"), _chat("Two"))
    _chunks(RecordingEngine(ScriptedEngine(), path, mode="all"), _chat("Three"))
    assert len(path.read_text().splitlines()) == 2
    with pytest.raises(ValueError, match="recorded already"):
        RecordingEngine(ScriptedEngine(), path, mode="once")
    fresh = tmp_path / "fresh.llamacpp.jsonl"
    _chunks(RecordingEngine(ScriptedEngine(), fresh, mode="once"), _chat("One"))
    assert fresh.exists()
    with pytest.raises(ValueError, match="ReplayEngine"):
        RecordingEngine(ScriptedEngine(), fresh, mode="none")  # type: ignore[arg-type]


# ---- the engine a replay is ------------------------------------------------------------------


def test_a_replay_offers_the_capabilities_the_recorded_engine_had(tmp_path: Path) -> None:
    plain, ranking = tmp_path / "plain.jsonl", tmp_path / "ranking.jsonl"
    assert not isinstance(RecordingEngine(ScriptedEngine(), plain), RerankingEngine)
    recorder = RecordingEngine(ScriptedRerankingEngine(score=lambda q, d: float(len(d))), ranking)
    assert isinstance(recorder, RerankingEngine) and isinstance(recorder, RecordingEngine)
    scores = recorder.rerank("q", ["a", "bb"])
    _record(plain, _chat("Hi"))
    assert not isinstance(ReplayEngine(plain), RerankingEngine | TokenPieceEngine)
    replay = ReplayEngine(ranking)
    assert isinstance(replay, RerankingEngine) and isinstance(replay, ReplayEngine)
    assert replay.rerank("q", ["a", "bb"]) == scores


def test_token_pieces_replay_as_bytes(tmp_path: Path) -> None:
    path = tmp_path / "pieces.jsonl"
    recorder = RecordingEngine(ScriptedTokenPieceEngine(piece=lambda t: bytes([t, 0xFF])), path)
    assert isinstance(recorder, TokenPieceEngine) and not isinstance(recorder, RerankingEngine)
    piece = recorder.token_piece(7)
    replay = ReplayEngine(path)
    assert isinstance(replay, TokenPieceEngine) and not isinstance(replay, RerankingEngine)
    assert replay.token_piece(7) == piece == b"\x07\xff"
    # An engine with several capabilities replays with all of them.
    both = frozenset({"rerank", "token_piece"})
    cassette = Cassette(None, engine=EngineRecord(info=SCRIPTED_INFO, capabilities=both))
    replay = ReplayEngine(cassette)
    assert isinstance(replay, TokenPieceEngine) and isinstance(replay, RerankingEngine)


def test_pace_keeps_the_recorded_delays() -> None:
    chunks = [{"at": 0.0, "text": "a"}, {"at": 0.15, "text": "b", "finish_reason": "stop"}]
    request = _chat("Hi")
    interaction = Interaction("stream", generation_fingerprint(request), {"chunks": chunks})
    cassette = Cassette(None, engine=EngineRecord(info=SCRIPTED_INFO), interactions=[interaction])
    start = time.monotonic()
    assert [c.text for c in ReplayEngine(cassette, pace=True).stream(request)] == ["a", "b"]
    assert time.monotonic() - start >= 0.15


def test_a_replayed_path_that_is_not_here_is_harmless(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "elsewhere.jsonl"
    info = replace(ScriptedEngine().info, path="/on/another/machine/model.gguf")
    _record(path, _chat("Hi"), info=info)
    chat = ChatLlamaCpp(engine=ReplayEngine(path))
    assert chat.profile is not None and chat.profile["max_input_tokens"] == info.n_ctx_per_seq
    assert "no profile" not in caplog.text


def test_a_closed_replay_refuses_calls(tmp_path: Path) -> None:
    path = tmp_path / "closed.jsonl"
    _record(path, _chat("Hi"))
    replay = ReplayEngine(path)
    replay.close()
    with pytest.raises(EngineClosedError):
        _chunks(replay, _chat("Hi"))


# ---- the file --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("", "empty"),
        ("{not json\n", ":1: not JSON"),
        ('{"hello": 1}\n', "not a llamacpp-integrations cassette"),
        ('{"cassette": "llamacpp-integrations", "version": 99, "engine": {}}\n', "newer"),
        ('{"cassette": "llamacpp-integrations", "version": 0, "engine": {}}\n', "bad format"),
    ],
)
def test_a_corrupt_or_unreadable_cassette_is_a_clear_error(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(CassetteFormatError, match=problem):
        ReplayEngine(path)


def test_a_missing_cassette_says_to_record_it(tmp_path: Path) -> None:
    with pytest.raises(CassetteFormatError, match="record it first"):
        ReplayEngine(tmp_path / "missing.jsonl")


def test_an_old_version_is_migrated_or_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.jsonl"
    _record(path, _chat("Hi"))
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    monkeypatch.setattr("llamacpp_integrations.testing.cassette.CASSETTE_VERSION", 2)
    with pytest.raises(CassetteFormatError, match="older than this package can migrate"):
        Cassette.load(path)

    def to_version_2(old: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**old[0], "version": 2}, *old[1:]]

    monkeypatch.setitem(MIGRATIONS, 1, to_version_2)
    assert header["version"] == 1 and len(Cassette.load(path).interactions) == 1


# ---- concurrency -----------------------------------------------------------------------------


async def test_several_tasks_replay_one_cassette(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    questions = [f"Question {i}" for i in range(8)]
    answers = [Answer(pieces=[f"answer {i}", " ."]) for i in range(8)]
    _record(path, *(_chat(q) for q in questions), answers=answers)
    replay = ReplayEngine(path)

    async def ask(question: str) -> str:
        return "".join([c.text async for c in replay.astream(_chat(question))])

    got = await asyncio.gather(*(ask(q) for q in questions))
    assert got == [f"answer {i} ." for i in range(8)]


def test_several_threads_use_up_identical_answers_once_each(tmp_path: Path) -> None:
    path = tmp_path / "threads.jsonl"
    answers = [Answer(pieces=[str(i)]) for i in range(6)]
    recorder = RecordingEngine(ScriptedEngine(answers=answers), path)
    for _ in answers:
        recorder.generate(_chat("Same"))
    replay = ReplayEngine(path)
    got: list[str] = []

    def ask() -> None:
        got.append(replay.generate(_chat("Same")).text)

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(got) == [str(i) for i in range(6)]
