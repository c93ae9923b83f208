"""How much of ``max_tokens`` a forced answer keeps after a reasoning model's thinking."""

from __future__ import annotations

from llamacpp_integrations.tools.answer_room import (
    ANSWER_SHARE_CAP,
    answer_room,
    forced_answer_budget,
    schema_tokens,
)

CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "kind": {"enum": ["friend", "colleague"]},
    },
}


def test_bigger_schemas_need_more_tokens() -> None:
    assert 0 < schema_tokens(CITY) < schema_tokens(PERSON)
    assert schema_tokens({"anyOf": [CITY, PERSON]}) == schema_tokens(PERSON)
    assert schema_tokens(None) > 0


def test_a_deep_or_looping_schema_is_counted_in_bounded_time() -> None:
    deep: dict[str, object] = {"type": "string"}
    for _ in range(50):
        deep = {"type": "object", "properties": {"child": deep}}
    assert schema_tokens(deep) < 1000


def test_the_room_is_half_a_short_limit_and_capped_on_a_long_one() -> None:
    assert answer_room([CITY], 128) == 64
    assert answer_room([CITY], 100_000) == ANSWER_SHARE_CAP
    assert answer_room([CITY], 10) == 10  # never more than there is


def test_a_large_schema_keeps_what_it_needs() -> None:
    big = {"type": "object", "properties": {f"field_{i}": PERSON for i in range(10)}}
    assert answer_room([big], 4096) > ANSWER_SHARE_CAP
    assert forced_answer_budget([big], 200) == 0  # no room to think at all


def test_no_limit_means_no_budget() -> None:
    assert forced_answer_budget([CITY], None) is None
    assert forced_answer_budget([CITY], 128) == 64
