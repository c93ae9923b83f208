"""Structured output on the real model: every finished answer parses and validates."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from llamacpp_integrations import client
from llamacpp_integrations.client import CallResult
from llamacpp_integrations.engine import ChatMessage, ChatRequest, InferenceEngine, SamplingParams
from llamacpp_integrations.errors import OutputTruncatedError

from .helpers import QUESTIONS, finished


class Address(BaseModel):
    city: str = Field(max_length=40)
    country_code: str = Field(min_length=2, max_length=2)


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=40)
    age: int = Field(ge=0, le=120)
    email: str | None = None
    tags: list[str] = Field(default_factory=list, max_length=3)
    address: Address


def generate_structured(engine: InferenceEngine, request: ChatRequest, schema: Any) -> CallResult:
    return client.generate(engine, client.structured_plan(request, schema))


async def agenerate_structured(
    engine: InferenceEngine, request: ChatRequest, schema: Any
) -> CallResult:
    return await client.agenerate(engine, client.structured_plan(request, schema))


def _ask(text: str, seed: int) -> ChatRequest:
    return ChatRequest(
        messages=[ChatMessage(role="user", content=text)],
        max_tokens=200,
        sampling=SamplingParams(temperature=0.8, seed=seed),
    )


def _answers(
    engine: InferenceEngine, prompts: list[str], schema: Any
) -> list[CallResult | BaseException]:
    """Each prompt's structured answer (its index the seed), or the ``OutputTruncatedError`` it
    ended in (for ``finished``)."""
    outcomes: list[CallResult | BaseException] = []
    for seed, prompt in enumerate(prompts):
        try:
            outcomes.append(generate_structured(engine, _ask(prompt, seed), schema))
        except OutputTruncatedError as cut:
            outcomes.append(cut)
    return outcomes


def test_nested_pydantic_model_is_valid_on_twenty_prompts(any_engine: InferenceEngine) -> None:
    engine = any_engine
    schema = Person.model_json_schema()
    prompts = [f"Describe a person related to: {q} Answer in JSON." for q in QUESTIONS]
    outcomes = _answers(engine, [*prompts, *prompts[:4]], schema)
    for result in finished(outcomes, at_least=16):
        person = Person.model_validate(result.value)
        assert 0 <= person.age <= 120


async def test_json_mode_returns_an_object(any_engine: InferenceEngine) -> None:
    engine = any_engine
    try:
        result = await agenerate_structured(
            engine, _ask("Give me a JSON object about a cat.", 3), None
        )
    except OutputTruncatedError as cut:
        # What the mode guarantees when the tiny model loops inside a string until max_tokens
        # (it does on some CPUs): a typed error holding the start of an object, never text.
        assert cut.partial_text.lstrip().startswith("{")
    else:
        assert isinstance(result.value, dict)


def test_running_out_of_tokens_raises_with_the_partial_text(any_engine: InferenceEngine) -> None:
    engine = any_engine
    request = _ask("Describe a person in JSON.", 1)
    short = ChatRequest(messages=request.messages, max_tokens=3, sampling=request.sampling)
    with pytest.raises(OutputTruncatedError) as caught:
        generate_structured(engine, short, Person.model_json_schema())
    assert caught.value.partial_text.startswith("{")


def test_stop_strings_cannot_cut_the_document(any_engine: InferenceEngine) -> None:
    engine = any_engine
    request = ChatRequest(
        messages=[ChatMessage(role="user", content="A city in JSON.")],
        max_tokens=120,
        stop=["}", '"'],
        sampling=SamplingParams(temperature=0),
    )
    result = generate_structured(engine, request, Address.model_json_schema())
    Address.model_validate(result.value)


class Ticket(BaseModel):
    code: str = Field(pattern=r"^[A-Z]{3}-\d{4}$")
    contact: str = Field(pattern=r"^[a-z]+@[a-z]+\.(com|org)$")
    version: str = Field(pattern=r"^v\d+\.\d+$")


# What the tiny model is told to write: without it, it starts a URL in ``contact`` and, held to
# letters, often runs on to ``max_tokens``.
TICKET_HINT = "a code like ABC-1234, a contact email and a version like v1.2."


def test_answers_under_a_pattern_match_it(engine: InferenceEngine) -> None:
    """Answers under a schema of ``Field(pattern=...)`` strings: pydantic (its own regex
    engine) accepts every finished one. Sampled, the tiny model may run on inside an unbounded
    ``[a-z]+`` or ``\\d+`` until ``max_tokens``: that answer ends in the typed
    ``OutputTruncatedError`` (``finished``), never in one that breaks the pattern."""
    schema = Ticket.model_json_schema()
    topics = [
        "a broken printer", "a login problem", "a slow laptop",
        "a lost password", "a noisy fan", "a cracked screen",
    ]  # fmt: skip
    prompts = [f"Open a support ticket about {t}. Answer in JSON: {TICKET_HINT}" for t in topics]
    for result in finished(_answers(engine, prompts, schema), at_least=4):
        ticket = Ticket.model_validate(result.value)
        assert ticket.code[3] == "-"
