"""Query and document prefixes that embedding model families were trained with.

Retrieval models such as nomic-embed-text, E5 and BGE expect a marker before each query (and
some before each document); without it their vectors are measurably worse for search. The
table is keyed on the GGUF's architecture and on words of its name; a model it does not know
gets no prefix at all, so nothing is ever added to a chat model's text by guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Prefixes", "prefixes_for"]


@dataclass(frozen=True)
class Prefixes:
    """Text put before a query and before a document."""

    query: str = ""
    document: str = ""


_BGE_QUERY = "Represent this sentence for searching relevant passages: "

# (architecture or None for any, word that must appear in the lower-cased model name, prefixes);
# the first match wins, so the narrower entries come first.
_TABLE: tuple[tuple[str | None, str, Prefixes], ...] = (
    ("nomic-bert", "", Prefixes("search_query: ", "search_document: ")),
    ("nomic-bert-moe", "", Prefixes("search_query: ", "search_document: ")),
    (None, "nomic-embed", Prefixes("search_query: ", "search_document: ")),
    (None, "e5", Prefixes("query: ", "passage: ")),
    (None, "bge-m3", Prefixes()),  # trained without instructions
    (None, "bge", Prefixes(_BGE_QUERY, "")),
    (None, "mxbai-embed", Prefixes(_BGE_QUERY, "")),
    (
        None,
        "qwen3-embedding",
        Prefixes(
            "Instruct: Given a web search query, retrieve relevant passages that answer the "
            "query\nQuery:",
            "",
        ),
    ),
)


def prefixes_for(architecture: str, name: str | None) -> Prefixes:
    """The family's prefixes for a model, or none (empty strings) when it is not known."""
    lowered = (name or "").lower()
    for arch, word, prefixes in _TABLE:
        if arch is not None and arch != architecture:
            continue
        # A whole word of the name ("multilingual-e5-small", not "gemma3e5"...).
        if word and not re.search(rf"(^|[^a-z0-9]){re.escape(word)}($|[^a-z0-9])", lowered):
            continue
        return prefixes
    return Prefixes()
