"""Ray Data batch classes without Ray or a model: the row plumbing (every row out once, in
order, with its answer or its error) and the classes over scripted engines, called the way a
Ray Data actor calls them (``instance(batch)``)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # Ray Data's, with the ray extra
import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from PIL import Image
from pydantic import BaseModel

from llamacpp_integrations.engine import ChatRequest
from llamacpp_integrations.engine.types import GenerationRequest
from llamacpp_integrations.errors import (
    ContextOverflowError,
    InvalidRequestError,
)
from llamacpp_integrations.multimodal.decode import LoadedImage
from llamacpp_integrations.ray import EmbedBatches, GenerateBatches, RerankBatches
from llamacpp_integrations.ray.batch_rows import (
    columns_of,
    error_text,
    output_batch,
    run_rows,
    text_cell,
)
from llamacpp_integrations.testing import SCRIPTED_INFO, Answer, ScriptedEngine
from llamacpp_integrations.testing.scripted_capabilities import ScriptedRerankingEngine


def test_every_batch_format_reads_as_columns_of_python_values() -> None:
    expected = {"text": ["a", "b"], "n": [1, 2]}
    numpy = {"text": np.array(["a", "b"]), "n": np.array([1, 2])}
    assert columns_of(numpy) == expected
    assert columns_of(pd.DataFrame(expected)) == expected
    assert columns_of(pa.table(expected)) == expected
    with pytest.raises(InvalidRequestError, match="dict of columns"):
        columns_of([1, 2])


def test_a_cell_that_is_not_text_is_the_rows_typed_error() -> None:
    columns = {"text": ["ok", None, float("nan"), 3, b"raw"]}
    assert text_cell(columns, "text", 0) == "ok"
    assert text_cell(columns, "text", 4) == "raw"
    with pytest.raises(InvalidRequestError, match="missing value"):
        text_cell(columns, "text", 1)
    with pytest.raises(InvalidRequestError, match="missing value"):
        text_cell(columns, "text", 2)
    with pytest.raises(InvalidRequestError, match="a int"):
        text_cell(columns, "text", 3)
    with pytest.raises(InvalidRequestError, match="no column 'body'"):
        text_cell(columns, "body", 0)


def test_rows_run_concurrently_and_keep_their_order_and_errors() -> None:
    running = {"now": 0, "most": 0}

    def row(index: int):  # type: ignore[no-untyped-def]
        async def call() -> int:
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
            await asyncio.sleep(0.01 * (5 - index % 5))  # later rows finish first
            running["now"] -= 1
            if index % 3 == 0:
                raise ContextOverflowError(f"row {index} is too long", n_prompt_tokens=9, n_ctx=8)
            return index

        return call

    outcomes = run_rows([row(i) for i in range(10)], in_flight=4)
    assert running["most"] == 4
    assert [o.value for o in outcomes] == [None, 1, 2, None, 4, 5, None, 7, 8, None]
    assert [o.ok for o in outcomes].count(False) == 4
    assert error_text(outcomes[3].error) == "ContextOverflowError: row 3 is too long"  # type: ignore[arg-type]


def test_the_output_batch_passes_inputs_through_and_refuses_a_clash() -> None:
    ids = np.arange(3)
    batch = {"id": ids, "text": np.array(["a", "b", "c"])}
    columns = columns_of(batch)
    out = output_batch(
        batch,
        columns,
        {"v": [[1.0], None, [3.0]]},
        [None, ValueError("x"), None],
        error_column="error",
    )
    assert out["id"] is ids
    assert list(out["v"]) == [[1.0], None, [3.0]]
    assert list(out["error"]) == [None, "ValueError: x", None]
    with pytest.raises(InvalidRequestError, match="already a column"):
        output_batch(batch, columns, {"text": [1, 2, 3]}, [None] * 3, error_column="error")


def test_embeddings_match_the_engines_and_a_bad_row_fails_alone() -> None:
    engine = ScriptedEngine()
    job = EmbedBatches(engine=engine, normalize=True)
    batch = {"id": np.arange(4), "text": np.array(["one", "two", None, "four"], dtype=object)}
    out = job(batch)
    assert list(out["id"]) == [0, 1, 2, 3]
    for row, text in ((0, "one"), (1, "two"), (3, "four")):
        assert out["embedding"][row] == engine.embed([text])[0]
    assert out["embedding"][2] is None
    assert out["error"][2].startswith("InvalidRequestError: column 'text' holds a missing value")
    assert [e is None for e in out["error"]] == [True, True, False, True]


def test_an_embedding_call_that_fails_is_retried_row_by_row() -> None:
    class Picky(ScriptedEngine):
        def embed(self, texts, **keywords):  # type: ignore[no-untyped-def]
            if any(len(t) > 10 for t in texts):
                raise ContextOverflowError(
                    "a text is longer than the context", n_prompt_tokens=11, n_ctx=10
                )
            return super().embed(texts, **keywords)

    job = EmbedBatches(engine=Picky())
    out = job(pd.DataFrame({"text": ["short", "far too long a text", "tiny"]}))
    assert [v is None for v in out["embedding"]] == [False, True, False]
    assert out["error"][1] == "ContextOverflowError: a text is longer than the context"


def _said(request: GenerationRequest, turn: int = -1) -> object:
    """A chat request's message ``turn``'s text."""
    assert isinstance(request, ChatRequest)
    message = request.messages[turn]
    return message["content"] if isinstance(message, Mapping) else message.content


class City(BaseModel):
    name: str
    population: int


def test_structured_rows_become_columns_and_a_refused_value_is_its_rows_error() -> None:
    answers = [
        Answer(pieces=[json.dumps({"name": "Oslo", "population": 700000})]),
        Answer(pieces=[json.dumps({"name": "Bergen", "population": "many"})]),
    ]
    engine = ScriptedEngine(answers=answers)
    job = GenerateBatches(engine=engine, template="Describe {city}.", schema=City, in_flight=1)
    out = job({"city": np.array(["Oslo", "Bergen"])})
    assert list(out["name"]) == ["Oslo", None]
    assert list(out["population"]) == [700000, None]
    assert out["error"][0] is None and out["error"][1].startswith("ValidationError")
    assert [_said(r) for r in engine.requests] == [
        "Describe Oslo.",
        "Describe Bergen.",
    ]


def test_text_rows_keep_order_and_a_missing_template_value_fails_alone() -> None:
    engine = ScriptedEngine(script=[("", "fine")])
    job = GenerateBatches(engine=engine, template="{a} and {b}", system="Be brief.")
    out = job(
        {"a": np.array(["x", "y", "z"], dtype=object), "b": np.array([1, None, 3], dtype=object)}
    )
    assert list(out["generated"]) == ["fine", None, "fine"]
    assert out["error"][1] == "InvalidRequestError: column 'b' holds a missing value, not text"
    assert _said(engine.requests[0], 0) == "Be brief."
    # Rows run concurrently: the engine sees them in any order.
    assert sorted(str(_said(request)) for request in engine.requests) == ["x and 1", "z and 3"]


def test_tool_calls_come_as_json_text() -> None:
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    engine = ScriptedEngine(answers=[Answer.calling(("get_weather", {"city": "Oslo"}))])
    job = GenerateBatches(engine=engine, prompt_column="q", tools=[weather], tool_choice="required")
    out = job({"q": np.array(["Weather in Oslo?"])})
    assert json.loads(out["tool_calls"][0]) == [
        {"name": "get_weather", "arguments": {"city": "Oslo"}}
    ]


def test_bad_generation_arguments_are_refused_at_construction() -> None:
    engine = ScriptedEngine()
    with pytest.raises(InvalidRequestError, match="exactly one"):
        GenerateBatches(engine=engine)
    with pytest.raises(InvalidRequestError, match="does not parse"):
        GenerateBatches(engine=engine, template="{unclosed")
    with pytest.raises(InvalidRequestError, match="name columns"):
        GenerateBatches(engine=engine, template="{0} positional")
    with pytest.raises(InvalidRequestError, match="not both"):
        GenerateBatches(engine=engine, template="{a}", schema=City, tools=[])
    with pytest.raises(InvalidRequestError):
        GenerateBatches(engine=engine, template="{a}", tools=[{"bad": 1}])


def test_rerank_scores_each_row_grouping_rows_by_query() -> None:
    engine = ScriptedRerankingEngine(score=lambda query, document: float(len(document)))
    job = RerankBatches(engine=engine)
    batch = {
        "query": np.array(["q1", "q2", "q1", None], dtype=object),
        "document": np.array(["aa", "b", "cccc", "dd"], dtype=object),
    }
    out = job(batch)
    assert list(out["score"]) == [2.0, 1.0, 4.0, None]
    assert out["error"][3].startswith("InvalidRequestError")
    assert sorted(engine.reranks) == [("q1", ["aa", "cccc"]), ("q2", ["b"])]


def test_an_engine_that_cannot_rank_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="cannot rerank"):
        RerankBatches(engine=ScriptedEngine())


def _png(color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 4), color).save(out, format="PNG")
    return out.getvalue()


def test_an_image_column_follows_the_prompt_and_a_bad_image_fails_alone() -> None:
    seeing = replace(SCRIPTED_INFO, mmproj="scripted-mmproj.gguf")
    engine = ScriptedEngine(script=[("", "a square")], info=seeing, media_marker="<__media__>")
    job = GenerateBatches(engine=engine, template="What is in picture {n}?", image_column="image")
    images = [_png((255, 0, 0)), b"\x89PNG\r\n\x1a\n broken", None, _png((0, 0, 255))]
    out = job({"n": np.array([1, 2, 3, 4]), "image": np.array(images, dtype=object)})

    assert list(out["generated"]) == ["a square", None, None, "a square"]
    assert out["error"][1].startswith("ImageLoadError: ")
    assert (
        out["error"][2] == "InvalidRequestError: column 'image' holds a missing value, not an image"
    )
    assert len(engine.requests) == 2  # the bad rows never reached the engine
    asked: list[str] = []
    for request in engine.requests:
        parts = _said(request)
        assert isinstance(parts, list)
        text, image = parts
        assert image["type"] == "image" and isinstance(image["image"], LoadedImage)
        asked.append(str(text["text"]))
    assert sorted(asked) == ["What is in picture 1?", "What is in picture 4?"]


def test_an_image_column_on_a_model_without_a_projector_fails_every_row_typed() -> None:
    job = GenerateBatches(engine=ScriptedEngine(), prompt_column="q", image_column="image")
    out = job({"q": np.array(["what?"]), "image": np.array([_png((0, 0, 0))], dtype=object)})
    assert out["generated"][0] is None
    assert out["error"][0].startswith("ImageInputNotSupportedError: this model has no image")
