"""The second wave: chats over one system prompt, then more chats over it right after.

A chat turn's end, with the next turn's header, is a chunk edge of the prefill layout, so each
chat of the first wave but the first takes the system turn's cells whole from the one reading
it, each chat of the second keeps them whole from the cache, and neither reads the system
prompt's tail after its last block edge again. The answers stay those of each request read
alone (deterministic mode).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llamacpp_integrations.engine import ChatMessage, ChatRequest, Completion, Engine, EngineConfig
from tests.conformance.real_templates import template_dir

from .helpers import GREEDY

SYSTEM = (
    "You are the help desk of the Zephyr-9 field station on the northern ridge of Mount Kell. "
    "The station has three laboratories: atmospheric chemistry, glaciology and seismic "
    "monitoring, each with its own head, its own safety briefing and its own opening hours. "
    "Visitors sign in at the front desk, wear a badge at all times, and never enter a laboratory "
    "alone. The canteen opens from seven to nine, twelve to two and six to eight; the shuttle to "
    "the valley leaves at ten and at four, and the last one waits for no one. "
    "Answer in one or two short sentences, politely, and say when you do not know."
)
FIRST = ["When does the canteen open?", "Do I need a badge?", "What labs are there?"]
SECOND = ["When does the shuttle leave?", "Can I enter a lab alone?", "Where do I sign in?"]


def _chat(question: str) -> ChatRequest:
    return ChatRequest(
        messages=[
            ChatMessage(role="system", content=SYSTEM),
            ChatMessage(role="user", content=question),
        ],
        max_tokens=12,
        sampling=GREEDY,
    )


def _wave(engine: Engine, questions: list[str]) -> list[Completion]:
    with ThreadPoolExecutor(len(questions)) as pool:
        return list(pool.map(lambda q: engine.generate(_chat(q)), questions))


def test_the_second_wave_keeps_the_whole_system_turn(smollm_path: Path) -> None:
    config = EngineConfig(
        model=str(smollm_path), n_seq_max=3, n_ctx_per_seq=512, deterministic=True
    )
    with Engine(config) as engine:
        prompt = engine.prompt_tokens(_chat(FIRST[0]))
        pieces = [engine.token_piece(token) for token in prompt]
        turn_end = 1 + pieces.index(b"<|im_end|>")
        # The edge: after the user's header that follows ("\n<|im_start|>user\n").
        edge = 1 + pieces.index(b"\n", turn_end + 1)
        assert edge == turn_end + 4
        # Past the first block and off the 64-position grid: a block edge alone keeps less.
        assert edge > 64 and edge % 64
        first = _wave(engine, FIRST)
        second = _wave(engine, SECOND)
        # The first wave: one reads the system turn, the others take its cells in flight (or
        # from its slot, when they come after it read them).
        assert sorted(a.usage.cached_prompt_tokens for a in first) == [0, edge, edge]
        # The second wave keeps the whole system turn from the cache: each reads its question.
        assert [a.usage.cached_prompt_tokens for a in second] == [edge] * len(SECOND)
        alone = []
        for question in [*FIRST, *SECOND]:
            engine.clear_cache()
            alone.append(engine.generate(_chat(question)))
    assert [a.token_ids for a in [*first, *second]] == [a.token_ids for a in alone]
    assert all(a.usage.cached_prompt_tokens == 0 for a in alone)


@pytest.mark.parametrize("model", ["smollm_path", "gemma_path"])
def test_the_next_turn_keeps_the_whole_prompt_before_it(
    model: str, request: pytest.FixtureRequest
) -> None:
    # Both models' turn headers end with a line break (SmolLM2's own ChatML template; Gemma's
    # GGUF has none, so Gemma 2's published one, the same turns), so a chat's prompt ends on an
    # edge, after the assistant's header, and the next turn keeps all of it from the cache.
    template = None
    if model == "gemma_path":
        template = (template_dir() / "google-gemma-2-2b-it.jinja").read_text()
    config = EngineConfig(
        model=str(request.getfixturevalue(model)),
        n_seq_max=2,
        n_ctx_per_seq=1024,
        realign_when_idle=False,
        chat_template=template,
    )
    question = ChatMessage(role="user", content=FIRST[0])
    with Engine(config) as engine:
        first = engine.generate(ChatRequest(messages=[question], max_tokens=12, sampling=GREEDY))
        messages = [
            question,
            ChatMessage(role="assistant", content=first.text),
            ChatMessage(role="user", content=SECOND[0]),
        ]
        second = engine.generate(ChatRequest(messages=messages, max_tokens=4, sampling=GREEDY))
    assert second.usage.cached_prompt_tokens == first.usage.prompt_tokens
