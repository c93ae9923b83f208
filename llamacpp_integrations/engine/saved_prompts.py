"""The prompt cache on disk, applied to a generation context: long prompts' KV states saved after
they are read, and restored into a new request's slot when they share a longer prefix with its
prompt than any slot does. The files themselves (naming, checks, size cap) are
``prompt_disk_cache.py``'s."""

from __future__ import annotations

import logging

from .config import EngineConfig
from .prompt_disk_cache import PromptDiskCache
from .runner import GenerationContext, LoadedModel
from .scheduler import Scheduler, SeqState

__all__ = ["SavedPrompts", "state_identity"]

log = logging.getLogger("llamacpp_integrations.engine")


def state_identity(model: LoadedModel, config: EngineConfig) -> str:
    """What a saved state depends on: the weights, and the settings that shape the KV cells
    (their types, layout, adapters and RoPE)."""
    parts = {
        "file": str(model.path.name),
        "size": model.size_bytes,
        "params": model.n_params,
        "desc": model.description,
        "type_k": config.type_k,
        "type_v": config.type_v,
        "flash": config.flash_attention_for(model.n_gpu_layers),
        "lora": [(a.path, a.scale) for a in config.lora_adapters],
        "rope": [config.rope_freq_base, config.rope_freq_scale, config.rope_scaling_type],
    }
    return repr(sorted(parts.items()))


class SavedPrompts:
    """One engine's use of its ``prompt_cache_dir``; runs on the worker thread."""

    def __init__(self, model: LoadedModel, config: EngineConfig, scheduler: Scheduler) -> None:
        assert config.prompt_cache_dir is not None
        self.files = PromptDiskCache(
            config.prompt_cache_dir,
            state_identity(model, config),
            max_bytes=config.prompt_cache_max_bytes,
            min_tokens=config.prompt_cache_min_tokens,
        )
        self._scheduler = scheduler

    def restore(self, seq: SeqState, context: GenerationContext) -> None:
        """Restore a saved prompt sharing a longer prefix than the slots offer, if any."""
        prompt = seq.prompt
        if len(prompt) <= self.files.min_tokens:
            return
        found = self.files.find(prompt)
        if found is None:
            return
        n = min(found.n_shared, len(prompt) - 1)  # the last token is always evaluated
        if n <= seq.n_reused:
            return
        state = self.files.load(found)
        if state is None:
            return
        seq_id = seq.slot.seq_id
        if not context.set_seq_state(seq_id, state):
            log.warning("prompt cache: llama.cpp refused %s; evaluating instead", found.path.name)
            self._scheduler.forget(seq)
            return
        if not context.remove(seq_id, n) or not context.window_kept(seq_id, n):
            context.remove(seq_id, 0)
            self._scheduler.forget(seq)
            return
        self._scheduler.restored(seq, n)

    def save(self, seqs: list[SeqState], context: GenerationContext) -> None:
        """Save the state of sequences that just read a long prompt not saved yet."""
        for seq in seqs:
            prompt = seq.prompt
            # Only the prompt's cells: the first token is sampled, not decoded yet.
            if seq.n_past != len(prompt):
                continue
            if any(t < 0 for t in prompt) or self.files.has(prompt):
                continue
            self.files.save(prompt, context.seq_state(seq.slot.seq_id))
