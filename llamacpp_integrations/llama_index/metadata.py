"""``LlamaCpp.metadata``: LlamaIndex's ``LLMMetadata`` with what this LLM knows beyond it.

LlamaIndex's own fields (the window, the output budget, chat and function calling, the name)
are kept; ``LlamaCppMetadata`` adds, as typed fields of a subclass (``LLMMetadata`` drops keys
it does not declare), whether requests may carry images and where the engine put the model:
the facts ``doctor`` prints in its machine section, the same translation as LangChain's
``ChatLlamaCpp.placement`` (``client.model_facts``). Nothing is loaded to fill them: before
the engine is, ``placement`` is ``None`` and ``image_inputs`` what the settings say.
"""

from __future__ import annotations

from llama_index.core.base.llms.types import LLMMetadata
from llama_index.core.bridge.pydantic import Field

from ..client.model_facts import PlacementFacts

__all__ = ["LlamaCppMetadata"]


class LlamaCppMetadata(LLMMetadata):
    """``LLMMetadata`` with this LLM's image and audio input and placement."""

    image_inputs: bool | None = Field(
        default=None,
        description="Whether messages may carry images (a projector is loaded, or set: "
        "mmproj, or the projector an ollama:// vision model's manifest names); None: not "
        "known before the engine loads (mmproj='auto' with no projector on disk yet).",
    )
    audio_inputs: bool | None = Field(
        default=None,
        description="Whether messages may carry audio (the projector has an audio encoder, as "
        "the loaded engine or the projector file's header says); None: not known yet.",
    )
    placement: PlacementFacts | None = Field(
        default=None,
        description="Where the loaded engine put the model (doctor's machine facts: backend, "
        "layers offloaded, KV cache place and size, flash attention; a server's URL for a "
        "remote engine); None until the engine is loaded.",
    )
