"""The table of engine flags: each ``EngineFlag`` sets one ``EngineConfig`` field and names
llama-server's flag for the same setting."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

from ..engine.config import KvCacheType, Pooling, RopeScaling, Speculative, SplitMode
from . import values

__all__ = ["COMMANDS", "ENGINE_FLAGS", "EngineFlag"]

COMMANDS = frozenset({"serve", "chat", "doctor"})
"""The commands that load a model and so take the engine's flags."""


@dataclass(frozen=True)
class EngineFlag:
    """One command-line flag of the engine.

    Attributes:
        names: The flag, then its aliases (llama-server's other spellings among them).
        field: The ``EngineConfig`` field it sets.
        llama_server: llama-server's flag for the same setting, as the docs table shows it
            (``None``: it has none).
        read: Reads the value given (``None``: a switch that sets ``const``).
        const: What a switch sets the field to.
        metavar: How the help names the value.
        choices: The values allowed, when they are a fixed set.
        many: The flag may repeat, and each value (a list) adds to the field.
        help: What the flag does, when the field's documentation does not say it as the flag
            works.
        needs: A field that must be set by its flag too, else this flag would do nothing.
        commands: The commands that take it.
    """

    names: tuple[str, ...]
    field: str
    llama_server: str | None = None
    read: Callable[[str], Any] | None = int
    const: Any = True
    metavar: str | None = "N"
    choices: tuple[str, ...] | None = None
    many: bool = False
    help: str | None = None
    needs: str | None = None
    commands: frozenset[str] = COMMANDS

    @property
    def flag(self) -> str:
        """The flag's own name (the first of ``names``)."""
        return self.names[0]


def _switch(names: tuple[str, ...], field: str, const: bool, help: str, **kw: Any) -> EngineFlag:
    return EngineFlag(names, field, read=None, const=const, metavar=None, help=help, **kw)


def _choice(names: tuple[str, ...], field: str, allowed: tuple[str, ...], **kw: Any) -> EngineFlag:
    kw.setdefault("metavar", None)  # argparse then shows the choices
    return EngineFlag(names, field, read=str, choices=allowed, **kw)


_SPEC = "speculative"
_NO_DOCTOR = frozenset({"serve", "chat"})  # doctor's --chat-template is the template it checks

ENGINE_FLAGS: tuple[EngineFlag, ...] = (
    # Where the weights go: the GPU settings.
    EngineFlag(
        ("--n-gpu-layers", "-ngl", "--gpu-layers"),
        "n_gpu_layers",
        "`-ngl`, `--n-gpu-layers`",
        read=values.gpu_layers,
        metavar="N/all/auto",
        help="Layers offloaded to a GPU build of llama.cpp: a number, `all`, or `auto` (the "
        "default: every layer that fits in the GPU's free memory, none on a CPU build).",
    ),
    EngineFlag(("--main-gpu", "-mg"), "main_gpu", "`-mg`, `--main-gpu`", read=values.count),
    _choice(
        ("--split-mode", "-sm"),
        "split_mode",
        get_args(SplitMode),
        llama_server="`-sm`, `--split-mode` (also `tensor`)",
    ),
    EngineFlag(
        ("--tensor-split", "-ts"),
        "tensor_split",
        "`-ts`, `--tensor-split`",
        read=values.tensor_split,
        metavar="N0,N1,...",
        help="Share of the offloaded layers (or rows) each GPU takes, as `3,1`; unset: split "
        "by free memory.",
    ),
    EngineFlag(
        ("--flash-attn", "-fa"),
        "flash_attention",
        "`-fa`, `--flash-attn`",
        read=values.on_off_auto,
        metavar="on/off/auto",
        help="Flash attention on, off, or `auto` (the default: off on the CPU except with a "
        "unified cache or a quantized V cache, llama.cpp's choice on a GPU).",
    ),
    _choice(
        ("--cache-type-k", "-ctk", "--type-k"),
        "type_k",
        get_args(KvCacheType),
        llama_server="`-ctk`, `--cache-type-k`",
        metavar="TYPE",
    ),
    _choice(
        ("--cache-type-v", "-ctv", "--type-v"),
        "type_v",
        get_args(KvCacheType),
        llama_server="`-ctv`, `--cache-type-v`",
        metavar="TYPE",
        help="The V cache's element type (the same choices); a quantized one needs flash "
        "attention.",
    ),
    _switch(
        ("--no-mmap",),
        "use_mmap",
        False,
        "Read the weights into memory instead of mapping them.",
        llama_server="`--load-mode none` (before: `--no-mmap`)",
    ),
    _switch(
        ("--mlock",),
        "use_mlock",
        True,
        "Lock the weights in RAM so the OS cannot page them out.",
        llama_server="`--load-mode mlock` (before: `--mlock`)",
    ),
    _switch(
        ("--repack",),
        "weight_repacking",
        True,
        "Let ggml repack weights into CPU-specific layouts (default: on, except on CPUs with AMX).",
        llama_server="`--repack`",
    ),
    _switch(
        ("--no-repack",),
        "weight_repacking",
        False,
        "Keep the weights in their file layout (no CPU-specific repacking).",
        llama_server="`-nr`, `--no-repack`",
    ),
    EngineFlag(("--kv-memory-budget",), "kv_memory_budget", read=values.size, metavar="SIZE"),
    EngineFlag(("--threads", "-t"), "n_threads", "`-t`, `--threads`"),
    # Sequences and the KV cache.
    EngineFlag(("--slots", "--parallel", "-np"), "n_seq_max", "`-np`, `--parallel`"),
    EngineFlag(
        ("--ctx",),
        "n_ctx_per_seq",
        "`-c` (the whole cache: `-c` / `-np` per slot)",
        help="Context of one sequence; `0`: the model's training context; unset: sized to memory.",
    ),
    _switch(
        ("--unified-kv", "--kv-unified", "-kvu"),
        "kv_unified",
        True,
        "One KV cache all "
        "slots share, as llama-server's: far less memory, answers that may depend on it.",
        llama_server="`-kvu`, `--kv-unified`",
    ),
    EngineFlag(("--kv-cells",), "kv_cells", "`-c` with `-kvu`"),
    EngineFlag(("--kv-start-cells",), "kv_start_cells"),
    EngineFlag(("--batch-size", "-b"), "n_batch", "`-b`, `--batch-size`"),
    EngineFlag(
        ("--prefill-block",),
        "prefill_block",
        help="Prompts are read in chunks that end "
        "at multiples of this many positions (`0`: chunks fill the batch).",
    ),
    EngineFlag(("--prefill-per-step",), "prefill_per_step"),
    EngineFlag(("--max-queued",), "max_queued"),
    _switch(
        ("--no-idle-realign",),
        "realign_when_idle",
        False,
        "Leave the CPU idle between requests (follow-up turns then read earlier answers again).",
    ),
    _switch(
        ("--no-prefix-sharing",),
        "prefix_sharing",
        False,
        "Read a prompt's shared "
        "beginning again instead of copying the cells of a request reading it.",
    ),
    _switch(
        ("--deterministic",),
        "deterministic",
        True,
        "Decode every sequence on its own, "
        "so an answer does not depend on what else runs (no speculation, no unified cache).",
    ),
    # Speculative decoding.
    _choice(
        ("--spec-type",),
        _SPEC,
        get_args(Speculative),
        llama_server="`--spec-type` (`ngram-simple`, `draft-simple`, ...)",
        help="Speculative decoding: `ngram` drafts "
        "from the sequence's own prompt and output, `draft` with a draft model.",
    ),
    EngineFlag(
        ("--spec-draft-model", "-md", "--model-draft"),
        "speculative_draft_model",
        "`-md`, `--spec-draft-model`",
        read=str,
        metavar="MODEL",
        needs=_SPEC,
    ),
    EngineFlag(
        ("--spec-draft-n-max", "--draft-max"),
        "speculative_max_draft",
        "`--spec-draft-n-max`",
        needs=_SPEC,
    ),
    EngineFlag(
        ("--spec-ngram-size",),
        "speculative_ngram_size",
        "`--spec-ngram-simple-size-n` (one length)",
        needs=_SPEC,
    ),
    EngineFlag(("--spec-max-batch",), "speculative_max_batch", needs=_SPEC),
    _switch(
        ("--spec-grammar",),
        "speculative_grammar",
        True,
        "Speculate on answers a grammar constrains from the first token (structured output) too.",
        needs=_SPEC,
    ),
    # The prompt cache on disk.
    EngineFlag(
        ("--prompt-cache-dir",),
        "prompt_cache_dir",
        "`--slot-save-path` (slots saved on request)",
        read=str,
        metavar="DIR",
        help="A directory where the KV state of long prompts is saved, and restored for "
        "a prompt sharing a long prefix with one saved, after a restart too.",
    ),
    EngineFlag(
        ("--prompt-cache-max-bytes",),
        "prompt_cache_max_bytes",
        read=values.size,
        metavar="SIZE",
        needs="prompt_cache_dir",
    ),
    EngineFlag(("--prompt-cache-min-tokens",), "prompt_cache_min_tokens", needs="prompt_cache_dir"),
    # RoPE and YaRN: the model's own unless given.
    EngineFlag(("--rope-freq-base",), "rope_freq_base", "`--rope-freq-base`", read=float),
    EngineFlag(("--rope-freq-scale",), "rope_freq_scale", "`--rope-freq-scale`", read=float),
    _choice(
        ("--rope-scaling",),
        "rope_scaling_type",
        get_args(RopeScaling),
        llama_server="`--rope-scaling`",
    ),
    EngineFlag(("--yarn-orig-ctx",), "yarn_orig_ctx", "`--yarn-orig-ctx`"),
    EngineFlag(("--yarn-ext-factor",), "yarn_ext_factor", "`--yarn-ext-factor`", read=float),
    EngineFlag(("--yarn-attn-factor",), "yarn_attn_factor", "`--yarn-attn-factor`", read=float),
    EngineFlag(("--yarn-beta-fast",), "yarn_beta_fast", "`--yarn-beta-fast`", read=float),
    EngineFlag(("--yarn-beta-slow",), "yarn_beta_slow", "`--yarn-beta-slow`", read=float),
    # What is loaded beside the weights, and how the model is prompted.
    EngineFlag(
        ("--mmproj", "-mm"),
        "mmproj",
        "`-mm`, `--mmproj`",
        read=str,
        metavar="FILE",
        help="The model's image projector (an mmproj GGUF), or `auto` for the one "
        "beside the model.",
    ),
    EngineFlag(
        ("--lora",),
        "lora_adapters",
        "`--lora`",
        read=values.loras,
        metavar="[NAME=]FILE[,...]",
        many=True,
        help="A LoRA adapter applied with scale 1, `NAME=FILE` to give requests a name to "
        "choose it by (repeatable).",
    ),
    EngineFlag(
        ("--lora-scaled",),
        "lora_adapters",
        "`--lora-scaled`",
        read=values.scaled_loras,
        metavar="[NAME=]FILE:SCALE[,...]",
        many=True,
        help="A LoRA adapter applied with its scale; scale 0 loads it for the requests "
        "that ask for it only (repeatable).",
    ),
    EngineFlag(
        ("--chat-template-file",),
        "chat_template",
        "`--chat-template-file`",
        read=values.template_file,
        metavar="FILE",
        commands=_NO_DOCTOR,
        help="A Jinja chat template file used instead of the GGUF's (`doctor` takes "
        "it as `--chat-template`).",
    ),
    # Embeddings.
    _choice(
        ("--pooling",),
        "embedding_pooling",
        get_args(Pooling),
        llama_server="`--pooling`",
        help="How token vectors become one text vector (`model`: the GGUF's own).",
    ),
    EngineFlag(("--embedding-ctx",), "embedding_n_ctx"),
    EngineFlag(("--embedding-batch",), "embedding_n_seq_max"),
)
"""Every engine flag; every ``EngineConfig`` field but ``model`` (each command's positional
argument or ``--model``) has one."""
