"""Pydantic string fields (``pattern``, lengths, ``UUID1``..``UUID5``) through the grammar: what
the grammar writes, pydantic validates. Pydantic matches patterns with Rust's ``regex`` crate and
checks UUID versions, so this checks the grammar against an engine other than Python's ``re``."""

from __future__ import annotations

import json
import random
import uuid
from typing import Annotated

import pytest
from pydantic import UUID1, UUID3, UUID4, UUID5, BaseModel, Field

from llamacpp_integrations.tools.grammar import schema_to_gbnf

from .gbnf_matcher import Grammar


class Record(BaseModel):
    code: Annotated[str, Field(pattern=r"^[A-Z]{2}\d+$", max_length=8)]
    word: Annotated[str, Field(pattern=r"^\w+(\s\w+)*$", min_length=3, max_length=20)]
    token: Annotated[str, Field(pattern=r"^\S+$")]
    not_digits: Annotated[str, Field(pattern=r"^\D{2,4}$")]
    no_symbols: Annotated[str, Field(pattern=r"^[^\W_]+$")]
    anywhere: Annotated[str, Field(pattern=r"a.c")]
    line: Annotated[str, Field(pattern=r"^.*$")]
    quoted: Annotated[str, Field(pattern=r'^["\\\n\t]+$')]
    email: Annotated[str, Field(pattern=r"^[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}$", max_length=30)]
    v1: UUID1
    v3: UUID3
    v4: UUID4
    v5: UUID5


def test_what_the_grammar_writes_pydantic_validates() -> None:
    grammar = Grammar(schema_to_gbnf(Record.model_json_schema()))
    rng = random.Random(3)
    for _ in range(150):
        text = grammar.sample(rng)
        record = Record.model_validate_json(text)  # raises if pydantic disagrees
        assert record.v4.version == 4
        assert json.loads(text)["code"] == record.code


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_uuid_version_formats(version: int) -> None:
    grammar = Grammar(schema_to_gbnf({"type": "string", "format": f"uuid{version}"}))
    rng = random.Random(version)
    for _ in range(30):
        value = uuid.UUID(json.loads(grammar.sample(rng)))
        assert value.version == version
        assert value.variant == uuid.RFC_4122
    other = uuid.UUID(int=0x12345678_1234_0234_8234_123456789ABC)
    assert not grammar.accepts(json.dumps(str(other)))  # version 0
