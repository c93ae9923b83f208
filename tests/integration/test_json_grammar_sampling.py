"""Grammar-constrained sampling on the real model: every finished answer is valid for its schema.

The validator and the random schema strategy come from the unit tests of the converter (an
implementation of the keywords independent of it). Answers cut by ``max_tokens`` are counted and
reported, not validated; at least 80 % must finish on their own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Completion,
    Engine,
    SamplingParams,
)
from llamacpp_integrations.tools.grammar import schema_to_gbnf
from tests.integration.test_json_grammar import schemas, validate

SEEDS = range(4)

SCHEMAS: dict[str, dict[str, Any]] = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "email": {"type": "string", "format": "email"},
        },
        "required": ["name", "age"],
    },
    "weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "celsius": {"type": "number", "minimum": 10, "maximum": 40},
            "conditions": {"enum": ["sunny", "cloudy", "rainy"]},
        },
        "required": ["city", "celsius", "conditions"],
        "additionalProperties": False,
    },
    "event": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 40},
            "date": {"type": "string", "format": "date"},
            "starts": {"type": "string", "format": "date-time"},
            "online": {"type": "boolean"},
        },
        "required": ["title", "date"],
    },
    "shopping": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "item": {"type": "string", "minLength": 1, "maxLength": 20},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
            },
            "required": ["item", "quantity"],
        },
        "minItems": 1,
        "maxItems": 4,
    },
    "company": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 30},
            "address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string", "maxLength": 40},
                    "city": {"type": "string", "maxLength": 30},
                    "zip": {"type": "string", "minLength": 5, "maxLength": 5},
                },
                "required": ["city", "zip"],
            },
            "employees": {"type": "integer", "minimum": 1},
        },
        "required": ["name", "address"],
    },
    "contact": {
        "type": "object",
        "properties": {
            "handle": {"type": "string", "maxLength": 15},
            "email": {"anyOf": [{"type": "string", "format": "email"}, {"type": "null"}]},
            "score": {"type": ["number", "null"], "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        },
        "required": ["handle", "email", "score"],
    },
    "tree": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 10},
                    "children": {
                        "type": "array",
                        "items": {"$ref": "#/$defs/node"},
                        "maxItems": 2,
                    },
                },
                "required": ["name"],
            }
        },
        "$ref": "#/$defs/node",
    },
    "tags": {
        "type": "object",
        "properties": {
            "tags": {
                "type": "array",
                "items": {"enum": ["red", "green", "blue", "black"]},
                "minItems": 2,
                "maxItems": 3,
            }
        },
        "required": ["tags"],
    },
    "coordinates": {
        "type": "object",
        "properties": {
            "lat": {"type": "number", "minimum": -90, "maximum": 90},
            "lon": {"type": "number", "minimum": -180, "maximum": 180},
        },
        "required": ["lat", "lon"],
    },
    "settings": {
        "type": "object",
        "properties": {
            "version": {"const": 2},
            "enabled": {"type": "boolean"},
            "mode": {"enum": ["fast", "slow", 3, None]},
            "retries": {"type": "integer", "exclusiveMinimum": -1, "exclusiveMaximum": 6},
        },
        "required": ["version", "enabled", "mode"],
    },
    "ticket": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "note": {"type": "string", "maxLength": 30},
            "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            "due": {"type": "string", "format": "time"},
        },
        "required": ["id"],
    },
    "shape": {
        "oneOf": [
            {
                "type": "object",
                "properties": {
                    "kind": {"const": "circle"},
                    "radius": {"type": "number", "exclusiveMinimum": 0, "maximum": 100},
                },
                "required": ["kind", "radius"],
            },
            {
                "type": "object",
                "properties": {
                    "kind": {"const": "square"},
                    "side": {"type": "integer", "minimum": 1, "maximum": 50},
                    "label": {"type": "string", "maxLength": 12},
                },
                "required": ["kind", "side"],
            },
        ]
    },
    "pair": {
        "type": "array",
        "prefixItems": [{"type": "string", "maxLength": 12}, {"type": "integer", "minimum": -50}],
        "items": False,
        "minItems": 2,
    },
}


# A nudge where the model otherwise tends to go on forever (recursion).
HINTS = {"tree": " Keep it small: at most 3 nodes."}


def _request(schema: Any, seed: int, hint: str = "") -> ChatRequest:
    prompt = (
        f"Reply with one JSON value that matches this JSON schema, and nothing else.{hint}\n"
        + json.dumps(schema)
    )
    return ChatRequest(
        messages=[ChatMessage(role="user", content=prompt)],
        grammar=schema_to_gbnf(schema),
        max_tokens=256,
        sampling=SamplingParams(temperature=0.8, seed=seed),
    )


def _run_all(engine: Engine, requests: Sequence[ChatRequest]) -> list[Completion]:
    handles = [engine.submit(r, queue_timeout=None) for r in requests]
    return [h.result() for h in handles]


def _is_valid(schema: Any, completion: Completion) -> bool:
    try:
        value = json.loads(completion.text)
    except json.JSONDecodeError:
        return False
    return validate(value, schema)


def test_finished_answers_are_always_valid(engine: Engine) -> None:
    jobs = [(name, seed) for name in SCHEMAS for seed in SEEDS]
    requests = [_request(SCHEMAS[name], seed, HINTS.get(name, "")) for name, seed in jobs]
    completions = _run_all(engine, requests)
    report: dict[str, list[int]] = {name: [0, 0, 0] for name in SCHEMAS}  # runs, stop, valid
    invalid: list[tuple[str, str]] = []
    for (name, _), completion in zip(jobs, completions, strict=True):
        report[name][0] += 1
        if completion.finish_reason != "stop":
            continue
        report[name][1] += 1
        if _is_valid(SCHEMAS[name], completion):
            report[name][2] += 1
        else:
            invalid.append((name, completion.text))
    print("\nschema        runs stop valid")
    for name, (runs, stop, valid) in report.items():
        print(f"{name:13} {runs:4} {stop:4} {valid:5}")
    total_stop = sum(stop for _, stop, _ in report.values())
    print(f"total         {len(jobs):4} {total_stop:4} {total_stop - len(invalid):5}")
    assert not invalid, invalid
    assert total_stop >= 0.8 * len(jobs), report


@pytest.mark.slow
@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(schema=schemas(), seed=st.integers(0, 2**31))
def test_random_schemas_generate_valid_answers(engine: Engine, schema: Any, seed: int) -> None:
    completion = engine.generate(_request(schema, seed % 1000))
    valid = completion.finish_reason == "stop" and _is_valid(schema, completion)
    print(f"\n{completion.finish_reason:6} valid={valid!s:5} {json.dumps(schema)[:100]}")
    if completion.finish_reason == "stop":
        assert valid, (schema, completion.text)
