"""Ray Data batch jobs on a local cluster (the session's ``ray_cluster``): two actors embed a
corpus into the vectors the in-process adapter gives, a reranker's rows get the scores the
engine gives in-process, structured extraction with SmolLM2 gives a schema-valid value or a
typed error for every row, and bad rows (an oversized prompt, a broken image) fail alone,
every row coming out once, in order."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from pydantic import BaseModel, ValidationError

from llamacpp_integrations.engine import Engine
from llamacpp_integrations.langchain import LlamaCppEmbeddings
from llamacpp_integrations.ray import EmbedBatches, GenerateBatches, RerankBatches
from tests.builders.tiny_draft import build_tiny_draft
from tests.builders.tiny_encoder import build_tiny_encoder

ray = pytest.importorskip("ray")

# One thread per actor (num_cpus=1 each), the same in this process, so both sides compute
# alike; a small context keeps the engines small.
ENGINE: dict[str, Any] = {"n_threads": 1, "n_ctx_per_seq": 256, "n_seq_max": 32}
ANIMALS = ["cat", "dog", "hen", "cow", "fox", "owl", "eel"]
OVERSIZED = "word " * 400  # over n_ctx_per_seq (256) and over a small embedding context


@pytest.fixture(autouse=True)
def _ordered(ray_cluster: Any) -> None:
    """Ray Data hands out a dataset's blocks as they finish unless asked to keep the order."""
    del ray_cluster
    ray.data.DataContext.get_current().execution_options.preserve_order = True


ADJECTIVES = [
    "red", "blue", "green", "big", "small", "old", "new", "hot", "cold", "dark", "light", "fast",
    "slow", "long", "short", "tall", "wide", "deep", "soft", "hard", "wet", "dry", "sweet",
    "sour", "loud", "quiet", "happy", "sad", "rich", "poor", "clean", "dirty", "strong", "weak",
    "young", "thin", "thick", "warm", "cool", "brave",
]  # fmt: skip
NOUNS = [
    "cat", "dog", "hen", "cow", "fox", "owl", "eel", "bee", "ant", "pig", "bird", "fish", "tree",
    "rock", "star", "moon", "sun", "car", "boat", "ship", "road", "door", "book", "pen", "cup",
]  # fmt: skip


def _corpus(count: int) -> list[str]:
    # Distinct texts of two words (three tokens at most): the point is many rows through two
    # actors, and embedding costs per token.
    texts = [f"{adjective} {noun}" for adjective in ADJECTIVES for noun in NOUNS]
    assert len(texts) >= count
    return texts[:count]


def _run(
    items: list[dict[str, Any]], job: type, batch_size: int, actors: int = 2, **kwargs: Any
) -> list[Any]:
    dataset = ray.data.from_items(items).map_batches(
        job,
        fn_constructor_kwargs=kwargs,
        batch_size=batch_size,
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=1,
    )
    rows: list[Any] = dataset.take_all()
    return rows


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random-weight llama on SmolLM2's tokenizer (6.5 MB): what this test checks
    (every row once, in order, with the vector the adapter gives in-process) holds for any
    model, and SmolLM2 would spend a minute of one core on 2,000 embeddings. The adapters'
    vectors from SmolLM2 through Ray are checked in ``test_ray_engine.py``."""
    return build_tiny_draft(tmp_path_factory.mktemp("tiny") / "tiny-embedder.gguf")


def test_two_actors_embed_1000_texts_as_the_adapter_does_and_bad_rows_fail_alone(
    ray_cluster: Any, tiny_model: Path
) -> None:
    del ray_cluster
    texts = _corpus(1000)
    settings: dict[str, Any] = {"embedding_n_ctx": 64, **ENGINE}
    items: list[dict[str, Any]] = [{"id": i, "text": t} for i, t in enumerate(texts)]
    items.insert(500, {"id": -1, "text": OVERSIZED})  # longer than embedding_n_ctx
    items.insert(700, {"id": -2, "text": None})  # no text at all
    rows = _run(items, EmbedBatches, 100, model=str(tiny_model), **settings)

    assert [row["id"] for row in rows] == [item["id"] for item in items]
    bad = {row["id"]: row for row in rows if row["id"] < 0}
    assert bad[-1]["embedding"] is None
    assert bad[-1]["error"].startswith("ContextOverflowError: ")
    assert bad[-2]["error"].startswith("InvalidRequestError: column 'text' holds a missing")
    good = [row for row in rows if row["id"] >= 0]
    assert all(row["error"] is None for row in good)

    with LlamaCppEmbeddings(model=str(tiny_model), **settings) as local:
        expected = np.asarray(local.embed_documents(texts))
    got = np.asarray([row["embedding"] for row in good])
    assert got.shape == expected.shape
    # The engine packs texts into decodes by length, so a text's neighbours can differ between
    # the two runs (and the batch holding the bad rows went one text per request): float32
    # sums in another order move a vector slightly, never its direction (the engine's own
    # packing test, tests/integration/test_embeddings.py, holds packed texts to 0.99 of alone).
    # Where the neighbours are the same, the vectors are the same.
    cosines = np.sum(got * expected, axis=1) / (
        np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1)
    )
    assert cosines.min() > 0.99
    assert np.median(cosines) > 0.9999


def test_rerank_rows_score_as_the_engine_does_and_a_missing_document_fails_alone(
    ray_cluster: Any, tmp_path: Path
) -> None:
    del ray_cluster
    reranker = build_tiny_encoder(tmp_path / "tiny-reranker.gguf", reranker=True)
    queries = ["what is the river", "blue sky", "a cat"]
    documents = ["the river runs to the sea", "bread of copper", "a blue sky", "owl", "fish"]
    items: list[dict[str, Any]] = [
        {"query": q, "document": d} for q in queries for d in documents
    ]  # grouped by query, as the batch job scores them: one call per query
    items[7]["document"] = None
    rows = _run(items, RerankBatches, 6, actors=1, model=str(reranker), n_threads=1)

    assert [(row["query"], row["document"]) for row in rows] == [
        (item["query"], item["document"]) for item in items
    ]
    assert rows[7]["score"] is None
    assert rows[7]["error"].startswith("InvalidRequestError: column 'document' holds a missing")
    with Engine(model=str(reranker), n_threads=1) as local:
        for query in queries:
            mine = [row for row in rows if row["query"] == query and row["error"] is None]
            expected = local.rerank(query, [row["document"] for row in mine])
            # float32 sums: after another test in this process the scores differ in the fifth
            # significant digit (seen: 1.7e-5 relative); a wrong pairing differs in the first.
            assert [row["score"] for row in mine] == pytest.approx(expected, rel=1e-4)


class Legs(BaseModel):
    legs: int


def test_200_rows_of_extraction_are_schema_valid_or_typed_errors_in_order(
    ray_cluster: Any, smollm_path: Path
) -> None:
    del ray_cluster
    items: list[dict[str, Any]] = [{"id": i, "animal": ANIMALS[i % 7], "n": i} for i in range(200)]
    items.insert(60, {"id": -1, "animal": OVERSIZED})  # over the context
    items.insert(130, {"id": -2, "animal": None})  # a template column left empty
    rows = _run(
        items,
        GenerateBatches,
        50,
        actors=1,  # two would share the one core a test worker has
        model=str(smollm_path),
        template="How many legs has a {animal}?",
        schema=Legs,
        max_tokens=16,
        temperature=0.0,
        # Sixteen rows decoding at once in a short context: on one core a step over fewer,
        # smaller KV streams costs less than the rows it would add (measured: 100 rows took
        # 14 s so, 18 s with 32 sequences of 256 positions).
        **{**ENGINE, "n_seq_max": 16, "n_ctx_per_seq": 128},
    )

    assert [row["id"] for row in rows] == [item["id"] for item in items]
    bad = {row["id"]: row for row in rows if row["id"] < 0}
    assert bad[-1]["error"].startswith("ContextOverflowError: ")
    assert bad[-2]["error"].startswith("InvalidRequestError: column 'animal' holds a missing")
    assert all(bad[key]["legs"] is None for key in bad)

    valid = 0
    for row in (row for row in rows if row["id"] >= 0):
        if row["error"] is None:
            Legs.model_validate({"legs": row["legs"]})
            valid += 1
        else:  # what can go wrong with an answer, never what was wrong with another row
            kind = row["error"].split(":", 1)[0]
            assert kind in {"OutputTruncatedError", ValidationError.__name__}, row
            assert row["legs"] is None
    assert valid > 100  # the grammar holds the answers to the schema: most rows pass


def _png(color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), color).save(out, format="PNG")
    return out.getvalue()


def test_a_bad_prompt_and_a_broken_image_fail_alone_among_answers_about_images(
    ray_cluster: Any, smollm_path: Path, projector: Path
) -> None:
    del ray_cluster
    colors = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (9, 9, 9), (200, 200, 0), (0, 90, 90)]
    items: list[dict[str, Any]] = [
        {"q": f"Describe picture {i}.", "image": _png(color)} for i, color in enumerate(colors)
    ]
    items[2]["q"] = OVERSIZED
    items[4]["image"] = _png((1, 2, 3))[:40]  # a PNG cut short
    rows = _run(
        items,
        GenerateBatches,
        3,
        model=str(smollm_path),
        mmproj=str(projector),
        prompt_column="q",
        image_column="image",
        max_tokens=4,
        temperature=0.0,
        **ENGINE,
    )

    assert [row["q"] for row in rows] == [item["q"] for item in items]
    assert rows[2]["generated"] is None
    assert rows[2]["error"].startswith("ContextOverflowError: ")
    assert rows[4]["generated"] is None
    assert rows[4]["error"].startswith("ImageLoadError: ")
    others = [row for i, row in enumerate(rows) if i not in (2, 4)]
    assert all(row["error"] is None and row["generated"] for row in others)
