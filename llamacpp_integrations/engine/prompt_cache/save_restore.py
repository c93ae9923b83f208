"""The prompt cache on disk, applied to a generation context: long prompts' KV states saved after
they are read, and restored into a new request's slot when they share a longer prefix with its
prompt than any slot does. Prompts with images are saved too: an image's positions hold a key
naming its pixels, so a saved image is restored only into the same image in the same place,
and the projector is part of what a saved state depends on. The files themselves (naming,
checks, size cap) are ``disk_store.py``'s."""

from __future__ import annotations

import logging
import os
from collections.abc import Hashable, Mapping, Sequence

from ..batch import HEADER_SPAN, LEAD_PARTS, SHORT_TAIL, PrefillLayout
from ..config import EngineConfig
from ..native.runner import GenerationContext
from ..native.weights import LoadedModel
from ..prefix_index import PrefixIndex
from .disk_store import PromptDiskCache

__all__ = ["SavedPrompts", "state_identity"]

log = logging.getLogger("llamacpp_integrations.engine")


def state_identity(model: LoadedModel, config: EngineConfig) -> str:
    """What a saved state depends on: the weights, and the settings that shape the KV cells
    (their types, layout, adapters, RoPE, and the projector that turns images into them)."""
    parts = {
        "file": str(model.path.name),
        "size": model.size_bytes,
        "params": model.n_params,
        "desc": model.description,
        "type_k": config.type_k,
        "type_v": config.type_v,
        "flash": config.flash_attention_for(model.n_gpu_layers),
        "unified": config.kv_unified,
        "lora": [(a.path, a.scale) for a in config.lora_adapters],
        "rope": [config.rope_freq_base, config.rope_freq_scale, config.rope_scaling_type],
        # Where a prompt's chunks end decides which saved cells are exactly a cold read's.
        "prefill": [
            config.prefill_block_size,
            LEAD_PARTS,
            f"turn ends or the headers after them (within {HEADER_SPAN}), else lead edges",
            f"tails of at most {SHORT_TAIL} whole",
        ],
        "mmproj": _file_identity(config.mmproj),
    }
    return repr(sorted(parts.items()))


def _file_identity(path: str | None) -> tuple[str, int] | None:
    if path is None:
        return None
    try:
        return os.path.basename(path), os.path.getsize(path)
    except OSError:
        return os.path.basename(path), -1


class SavedPrompts:
    """One engine's use of its ``prompt_cache_dir``; runs on the worker thread. ``index``: the
    engine's prefix index, where the saved prompts' tokens are kept beside its slots'."""

    def __init__(
        self, model: LoadedModel, config: EngineConfig, index: PrefixIndex[Hashable] | None = None
    ) -> None:
        assert config.prompt_cache_dir is not None
        self.files = PromptDiskCache(
            config.prompt_cache_dir,
            state_identity(model, config),
            max_bytes=config.prompt_cache_max_bytes,
            min_tokens=config.prompt_cache_min_tokens,
            index=index,
        )

    def refresh(self) -> None:
        """Bring the index up to date with the directory (before a lookup)."""
        self.files.refresh()

    def saved_length(self, prompt: Sequence[int], shared: Mapping[Hashable, int]) -> int:
        """The length of the saved prompt ``restore`` would consider for ``prompt`` (``0``:
        none): a sequence's stream must hold all of it to take the state. ``shared``: the
        index's lookup of ``prompt`` (after ``refresh``)."""
        if len(prompt) <= self.files.min_tokens:
            return 0
        found = self.files.find(prompt, shared)
        return 0 if found is None else len(found.tokens)

    def restore(
        self,
        context: GenerationContext,
        seq_id: int,
        prompt: Sequence[int],
        n_reused: int,
        layout: PrefillLayout,
        image_spans: Mapping[int, int],
        shared: Mapping[Hashable, int],
    ) -> int | None:
        """Put a saved prompt into the sequence when it keeps a longer prefix of ``prompt``
        (as far as ``layout`` lets a prompt keep cells, images whole) than the ``n_reused``
        tokens its cells already give. ``image_spans``: the prompt's images, start ->
        positions; ``shared``: the index's lookup of ``prompt`` (after ``refresh``).

        Returns how many prompt tokens the sequence now holds: ``n_reused`` when nothing better
        was saved (the cells are untouched), more after a restore, or ``None`` when a restore
        failed and left the sequence empty.
        """
        if len(prompt) <= self.files.min_tokens:
            return n_reused
        found = self.files.find(prompt, shared)
        if found is None:
            return n_reused
        # A saved state holds a whole prompt, read in the layout.
        saved = len(found.tokens)
        n = layout.kept(
            found.n_shared,
            len(prompt),
            image_spans,
            exact=layout.exact_after(saved, saved, found.tokens),
            cached_prompt=saved,
            tokens=prompt,
        )
        if n <= n_reused:
            return n_reused
        state = self.files.load(found)
        if state is None:
            return n_reused
        if not context.set_seq_state(seq_id, state):
            log.warning("prompt cache: llama.cpp refused %s; evaluating instead", found.path.name)
            return None
        if not context.remove(seq_id, n) or not context.window_kept(seq_id, n):
            context.remove(seq_id, 0)
            return None
        return n

    def save(self, context: GenerationContext, read: Sequence[tuple[int, Sequence[int]]]) -> None:
        """Save the cells of sequences that just read a long prompt not saved yet, given as
        ``(seq_id, prompt)`` pairs whose cells hold exactly that prompt."""
        for seq_id, prompt in read:
            if self.files.has(prompt):
                continue
            self.files.save(prompt, context.seq_state(seq_id))
