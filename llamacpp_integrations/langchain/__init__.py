"""LangChain adapters over the shared llama.cpp engine."""

from __future__ import annotations

from ..optional import requires

with requires("langchain"):
    from .chat_model import ChatLlamaCpp
    from .embeddings import LlamaCppEmbeddings
    from .reranker import LlamaCppReranker

__all__ = ["ChatLlamaCpp", "LlamaCppEmbeddings", "LlamaCppReranker"]
