"""LlamaIndex adapters over the shared llama.cpp engine.

* :class:`LlamaCpp`: a ``FunctionCallingLLM`` (chat, completion, streaming, async, tool calling
  and grammar-constrained structured output) for agents, query engines and chat engines;
* :class:`LlamaCppEmbedding`: a ``BaseEmbedding`` for indexes and retrievers;
* :class:`ModelTokenizer`: the model's tokenizer (``llm.tokenizer``) for
  ``Settings.tokenizer``, so LlamaIndex sizes prompts in the model's own tokens.

Both built with the same ``model`` and engine settings share one engine (one copy of the
weights). Needs the ``llama-index`` extra: ``pip install 'llamacpp-integrations[llama-index]'``.
"""

from __future__ import annotations

from ..optional import requires

with requires("llama-index"):
    from .embedding import LlamaCppEmbedding
    from .llm import LlamaCpp
    from .metadata import LlamaCppMetadata
    from .reranker import LlamaCppRerank
    from .window import ModelTokenizer

__all__ = ["LlamaCpp", "LlamaCppEmbedding", "LlamaCppMetadata", "LlamaCppRerank", "ModelTokenizer"]
