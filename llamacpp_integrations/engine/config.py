"""Engine configuration: which weights to load, and how to serve them.

``EngineConfig`` is frozen and hashable. Two groups of its fields play different roles:

* the *weights* (``WeightsKey``: model file, GPU offload and split, mmap, mlock, repacking)
  identify what is loaded into memory. Every engine of a process over the same weights shares
  one loaded copy;
* everything else says how requests are *served* (sequences, context per sequence, batch size,
  threads, KV cache types, RoPE, LoRA adapters, queue, embedding context, projector, chat
  template). The registry shares one engine per whole configuration, so adapters asking for the
  same settings batch together.

LoRA adapters are serving settings, not weights: llama.cpp loads an adapter against a model
(``llama_adapter_lora_init``) but applies it per *context* (``llama_set_adapters_lora``), never
per sequence. So the host loads each adapter file once beside the weights it belongs to, and each
engine applies its own adapters, with its scales, to its contexts: two engines with different
adapters (or scales) share one copy of the base weights, and each request takes the adapters of
the engine it is sent to.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from ..errors import InvalidRequestError
from ..models import resolve_mmproj_path, resolve_model_path
from .config_values import LoraAdapter, lora_adapters, tensor_split
from .cpu_budget import read_cpu_budget

Pooling = Literal["mean", "cls", "last", "rank", "model"]
KvCacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"]
RopeScaling = Literal["none", "linear", "yarn", "longrope"]
SplitMode = Literal["none", "layer", "row"]
Speculative = Literal["ngram", "draft"]

QUANTIZED_KV_TYPES = frozenset(get_args(KvCacheType)) - {"f32", "f16", "bf16"}
"""Cache types stored in blocks; llama.cpp needs flash attention for such a V cache."""

# Measured (benchmarks/reproducibility.py): a long prompt read in chunks of 64 positions goes
# as fast as in full batches (1.03x), 32 a little slower (0.97x); a larger block only makes a
# follow-up turn read more of the earlier prompt again.
DEFAULT_PREFILL_BLOCK = 64

__all__ = [
    "QUANTIZED_KV_TYPES",
    "WEIGHTS_FIELDS",
    "EngineConfig",
    "KvCacheType",
    "LoraAdapter",
    "Pooling",
    "RopeScaling",
    "Speculative",
    "SplitMode",
    "WeightsKey",
]

WEIGHTS_FIELDS = (
    "model",
    "n_gpu_layers",
    "use_mmap",
    "weight_repacking",
    "use_mlock",
    "main_gpu",
    "tensor_split",
    "split_mode",
)
"""The ``EngineConfig`` fields that identify loaded weights; the others only shape serving."""


@dataclass(frozen=True)
class WeightsKey:
    """What identifies a loaded copy of a model's weights (``model`` is a resolved path)."""

    model: str
    n_gpu_layers: int | None
    use_mmap: bool
    weight_repacking: bool | None
    use_mlock: bool = False
    main_gpu: int = 0
    tensor_split: tuple[float, ...] | None = None
    split_mode: SplitMode = "layer"


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """How to load a model and how to serve it.

    Engines whose configurations differ only in serving settings share one copy of the
    weights and one worker thread; each keeps its own contexts (see ``engine/worker/host.py``).

    Attributes:
        model: A local ``.gguf`` path, a known short name (``smollm2-135m``, ``gemma3-270m``),
            an ``hf://`` spec (needs the ``hub`` extra): ``hf://owner/repo[@revision]/file.gguf``,
            ``hf://owner/repo[@revision]:Q4_K_M`` (the file by quantization tag) or
            ``hf://owner/repo`` (its only model, else its Q4_K_M); or ``None`` for the
            ``LLAMACPP_MODEL`` environment variable. Split GGUFs are fetched whole. Hub files
            land in the Hugging Face cache; with ``HF_HUB_OFFLINE=1`` only the cache is read.
        mmproj: The model's multimodal projector (a ``mmproj`` GGUF, as a path or ``hf://``
            spec), which lets requests carry images; ``"auto"`` takes the ``mmproj*.gguf`` of the
            model's Hub repository or of its local directory (with several, the one of the
            model's precision, else F16); ``None`` for a text-only engine. Loaded once beside
            the weights, whichever engines use it.
        n_seq_max: How many sequences are decoded together; more requests wait in the queue.
        n_ctx_per_seq: Context (prompt + generated tokens) of one sequence. ``None`` (the
            default) takes the model's training context, reduced only as far as needed for the
            KV cache (``n_seq_max`` streams of it, or with ``kv_unified`` one cache) to fit
            ``kv_memory_budget``; ``0`` takes the training context whatever it costs; a number
            is used as given.
        n_batch: Most tokens put into one ``llama_decode`` step (running sequences + prompt chunks).
        prefill_block: Prompts are read in chunks that end at multiples of this many positions,
            after each turn (its end-of-turn token and the next turn's header) and halfway
            through the first block until a turn has ended (a shared beginning); a
            chat's question is read with the assistant's header, other long tails end with the
            last token alone. So cells a prompt keeps from the cache (or from a request reading
            the same prefix) are exactly those reading it again would make.
            With a KV stream per sequence (the default) a prompt keeps cached cells only up to
            such an edge, so a repeated or extended prompt gets the same greedy answer with or
            without the cache, and while the engine idles finished answers are read again in
            this layout so that a follow-up keeps them (see ``docs/reproducibility.md``); a
            unified cache keeps every shared cell. ``None`` (the default): 64, or what
            ``n_batch`` leaves beside ``n_seq_max`` decoding tokens when that is less; at most
            that much when given; ``0`` turns this off (chunks fill the batch, and a cached
            prefix is kept to the token).
        prefill_per_step: Most prompt tokens read in one step while other requests are
            generating (at least one prefill block). Each step's time grows with the prompt
            tokens in it, and so does the pause before every stream's next token. A prompt
            is read one block per step in the prefill layout anyway, so this matters when
            several prompts are read at once beside running streams. ``None`` (the default):
            no limit beyond ``n_batch``, the most throughput.
        deterministic: Decode every sequence on its own, never in a batch beside another
            sequence's tokens, so a request's greedy tokens do not depend on what else runs
            (for evaluations and tests); concurrent requests then take turns step by step
            instead of sharing decodes. Speculative decoding cannot be combined with it.
        realign_when_idle: While the engine has nothing to do, read finished answers again
            in the prefill layout (into a free slot), so that a follow-up turn keeps them
            instead of reading them again (a unified cache keeps them as they are); ``False``
            saves that work (one-shot traffic, or a machine whose other programs should have
            the idle CPU).
        prefix_sharing: A request whose prompt shares a beginning (of at least one prefill
            block) with one still being read waits for that request's cells and copies them,
            reading only the rest, instead of reading the shared prefix again, images in it
            included (needs the prefill layout: ``prefill_block`` not ``0``).
        n_threads: CPU threads for decoding; ``None``: one per physical core this process may
            run on, within its container's CPU limit (``engine/cpu_budget.py``), and fewer
            while other work keeps those cores busy (``engine/worker/thread_governor.py``;
            on Linux, with the model on the CPU, outside ``deterministic`` mode).
        n_gpu_layers: Layers offloaded to a GPU build of llama.cpp (``-1`` for all, ``0`` for
            none). ``None`` (the default): every layer when llama.cpp was built with a GPU
            backend and the weights fit in the GPU's free memory, as many as fit when they do
            not, none on a CPU build.
        kv_memory_budget: Bytes this engine's KV cache may take when ``n_ctx_per_seq`` is
            chosen for you. ``None``: half of the memory left after the weights, on the GPU
            when layers are offloaded, else in RAM.
        flash_attention: Flash attention on or off. ``None`` leaves it off on the CPU (there it
            read a 4,000-token prompt 0.8x as fast, measured on 2 cores), except with
            ``kv_unified`` (on: it skips the cells of other sequences, which plain attention
            reads), and to llama.cpp's choice when layers are offloaded to a GPU.
        kv_unified: One KV cache of ``kv_cells`` cells for all sequences, as llama-server has,
            instead of a stream of ``n_ctx_per_seq`` cells per sequence (the default): a
            fraction of the memory (the training context once, not once per sequence), a
            prefix several requests share held once, one request allowed all the cells, and a
            request that finds no room waiting for one that ends. The costs, measured in
            ``docs/performance.md``: every token attends over every used cell (flash attention,
            which skips other sequences' cells, is then on by default), and an answer may
            change with what else the cache holds (``docs/reproducibility.md``), so
            ``deterministic`` cannot be combined with it.
        kv_cells: Cells of the unified cache. ``None``: ``n_seq_max * n_ctx_per_seq`` when
            ``n_ctx_per_seq`` is set (every sequence can fill its context at once), else the
            training context reduced to fit ``kv_memory_budget``.
        kv_start_cells: With a stream per sequence, the cells each stream starts with. A
            stream grows (doubling, up to ``n_ctx_per_seq``) when a sequence needs more: the
            context is made again and every sequence's cells are carried over exactly, so
            growing never changes an answer. ``None`` (the default): all streams together start
            with the model's training context (at least 512 cells each), about what
            llama-server's one cache holds; ``0``: every stream starts at ``n_ctx_per_seq``
            (no growing).
        use_mmap: Map the weights instead of reading them into memory.
        weight_repacking: Let ggml repack weights into CPU-specific layouts (its "extra buffer
            types", AMX included). ``None`` turns it off on CPUs that advertise AMX, where ggml's
            AMX kernels crash on some virtual machines, and on everywhere else.
        use_mlock: Lock the weights in RAM so the OS cannot page them out.
        main_gpu: The GPU that holds the whole model when ``split_mode`` is ``none``.
        tensor_split: Share of the offloaded layers (or rows) each GPU takes, e.g.
            ``(3.0, 1.0)``; ``None`` splits by free memory.
        split_mode: How a model offloaded to several GPUs is split: ``layer`` (layers and KV
            cache across GPUs), ``row`` (rows of the weights too, where supported) or ``none``
            (one GPU, ``main_gpu``).
        type_k: The K cache's element type: ``f16`` (default), ``f32``, ``bf16``, or a
            quantized ``q8_0``, ``q4_0``, ``q4_1``, ``q5_0``, ``q5_1``, ``iq4_nl`` (smaller cells,
            slightly different logits).
        type_v: The V cache's element type (same choices). A quantized V cache needs flash
            attention, which it turns on when ``flash_attention`` is ``None``.
        rope_freq_base: RoPE base frequency; ``None`` takes the model's.
        rope_freq_scale: RoPE frequency scale (``0.5`` stretches positions to twice the
            trained context, linear scaling); ``None`` takes the model's.
        rope_scaling_type: ``none``, ``linear``, ``yarn`` or ``longrope``; ``None`` takes the
            model's.
        yarn_orig_ctx: YaRN: the context the model was trained on; ``None`` takes the model's.
        yarn_ext_factor: YaRN extrapolation mix factor; ``None`` takes the model's.
        yarn_attn_factor: YaRN attention magnitude factor; ``None`` takes llama.cpp's.
        yarn_beta_fast: YaRN low correction dimension; ``None`` takes llama.cpp's.
        yarn_beta_slow: YaRN high correction dimension; ``None`` takes llama.cpp's.
        lora_adapters: LoRA adapters applied to every context of the engine, as
            ``LoraAdapter(path, scale)`` or ``{"path": ..., "scale": ...}`` (``EngineConfig``
            also takes ``(path, scale)`` pairs and bare paths). Each file is loaded once per
            loaded model; engines with other adapters share the base weights.
        max_queued: Requests allowed to wait for a free sequence before ``submit`` reports overload.
        chat_template: A Jinja chat template that replaces the one stored in the GGUF.
        embedding_pooling: How token vectors become one text vector (``model`` keeps the GGUF's
            own pooling, falling back to ``mean`` when the model declares none; ``rank`` is a
            cross-encoder's classification head, for ``Engine.rerank``).
        embedding_n_ctx: Token budget of one embedding batch; also the longest text embedded.
        embedding_n_seq_max: Most texts embedded in one decode (llama.cpp tracks at most 256;
            more is taken as 256). 256 costs about 35 MB more than 128 on SmolLM2.
        speculative: Speculative decoding: ``"ngram"`` drafts each sequence's next tokens by
            looking its last tokens up in its own prompt and output (prompt lookup);
            ``"draft"`` has a small model with the same vocabulary
            (``speculative_draft_model``) draft them, greedily. Either way the drafts are
            verified inside the shared batched decode; ``None`` (the default) turns it off.
            Outputs are the same either way (greedy: the same tokens up to rounding at
            near-ties; sampled: the same distribution); answers that quote their input
            (extraction, RAG, code edits, JSON) come faster.
        speculative_draft_model: The draft model of ``speculative="draft"``, named as
            ``model`` is (a path, a known short name or an ``hf://`` spec). Its vocabulary
            must be the target's (checked when the engine starts: ``ModelLoadError``).
        speculative_max_draft: Most tokens one sequence drafts per step (the draft length
            adapts below this to the sequence's acceptance).
        speculative_ngram_size: Longest n-gram looked up for a draft (down to 2).
        speculative_max_batch: Speculate only while at most this many sequences are
            decoding: a fuller batch already keeps the CPU busy, and drafts would only slow it.
        speculative_grammar: Speculate on answers a grammar constrains from the first token
            (structured output, ``grammar=``) too. Off by default: drafts copied from the
            prompt rarely fit the grammar's punctuation, and such answers came slower with
            speculation than without (``make bench-spec``). Lazy grammars (tool calls) always
            speculate on the free text before their trigger.
        prompt_cache_dir: A directory where the KV state of long prompts is saved, so that a
            prompt sharing a long prefix with a saved one (a system prompt, tool block or
            document), in this process or after a restart, restores it instead of evaluating it.
            ``None`` (the default) keeps the cache in memory only (the slots). Several engines
            may share one directory.
        prompt_cache_max_bytes: Size cap of ``prompt_cache_dir``; the least recently used
            states are deleted beyond it.
        prompt_cache_min_tokens: Prompts shorter than this are neither saved nor restored.
    """

    model: str | None = None
    mmproj: str | None = None
    n_seq_max: int = 8
    n_ctx_per_seq: int | None = None
    n_batch: int = 512
    prefill_block: int | None = None
    prefill_per_step: int | None = None
    deterministic: bool = False
    realign_when_idle: bool = True
    prefix_sharing: bool = True
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    kv_memory_budget: int | None = None
    flash_attention: bool | None = None
    kv_unified: bool = False
    kv_cells: int | None = None
    kv_start_cells: int | None = None
    use_mmap: bool = True
    weight_repacking: bool | None = None
    use_mlock: bool = False
    main_gpu: int = 0
    tensor_split: tuple[float, ...] | None = None
    split_mode: SplitMode = "layer"
    type_k: KvCacheType = "f16"
    type_v: KvCacheType = "f16"
    rope_freq_base: float | None = None
    rope_freq_scale: float | None = None
    rope_scaling_type: RopeScaling | None = None
    yarn_orig_ctx: int | None = None
    yarn_ext_factor: float | None = None
    yarn_attn_factor: float | None = None
    yarn_beta_fast: float | None = None
    yarn_beta_slow: float | None = None
    lora_adapters: tuple[LoraAdapter, ...] = ()
    max_queued: int = 256
    chat_template: str | None = None
    embedding_pooling: Pooling = "model"
    embedding_n_ctx: int = 2048
    embedding_n_seq_max: int = 128

    speculative: Speculative | None = None
    speculative_draft_model: str | None = None
    speculative_max_draft: int = 8
    speculative_ngram_size: int = 3
    speculative_max_batch: int = 2
    speculative_grammar: bool = False
    prompt_cache_dir: str | None = None
    prompt_cache_max_bytes: int = 2 * 1024**3
    prompt_cache_min_tokens: int = 256

    def __post_init__(self) -> None:
        self._check_choices()
        # Lists and (path, scale) pairs are accepted; the stored form is hashable.
        object.__setattr__(self, "lora_adapters", lora_adapters(self.lora_adapters))
        if self.tensor_split is not None:
            object.__setattr__(self, "tensor_split", tensor_split(self.tensor_split))
        checks = {
            "n_seq_max": self.n_seq_max >= 1,
            "n_ctx_per_seq": self.n_ctx_per_seq is None or self.n_ctx_per_seq >= 0,
            "kv_cells": self.kv_cells is None or self.kv_cells >= 1,
            "kv_start_cells": self.kv_start_cells is None or self.kv_start_cells >= 0,
            "n_gpu_layers": self.n_gpu_layers is None or self.n_gpu_layers >= -1,
            "kv_memory_budget": self.kv_memory_budget is None or self.kv_memory_budget >= 0,
            "n_batch": self.n_batch >= 8,
            "prefill_block": self.prefill_block is None
            or 0 <= self.prefill_block <= self.n_batch - self.n_seq_max,
            "prefill_per_step": self.prefill_per_step is None or self.prefill_per_step >= 1,
            "max_queued": self.max_queued >= 1,  # 0 would leave no room for any request
            "embedding_n_ctx": self.embedding_n_ctx >= 8,
            "embedding_n_seq_max": self.embedding_n_seq_max >= 1,
            "speculative_max_draft": 0 <= self.speculative_max_draft <= 64,
            "speculative_ngram_size": 2 <= self.speculative_ngram_size <= 16,
            "speculative_max_batch": self.speculative_max_batch >= 0,
            "prompt_cache_max_bytes": self.prompt_cache_max_bytes >= 0,
            "prompt_cache_min_tokens": self.prompt_cache_min_tokens >= 1,
            "n_threads": self.n_threads is None or self.n_threads >= 1,
            "main_gpu": self.main_gpu >= 0,
            "rope_freq_base": self.rope_freq_base is None or self.rope_freq_base > 0,
            "rope_freq_scale": self.rope_freq_scale is None or self.rope_freq_scale > 0,
            "yarn_orig_ctx": self.yarn_orig_ctx is None or self.yarn_orig_ctx >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise InvalidRequestError(f"invalid EngineConfig values: {', '.join(bad)}")
        if self.speculative == "draft" and not self.speculative_draft_model:
            raise InvalidRequestError(
                'speculative="draft" needs a draft model: set speculative_draft_model'
            )
        if self.speculative_draft_model is not None and self.speculative != "draft":
            raise InvalidRequestError(
                'speculative_draft_model is only used with speculative="draft"; '
                f"speculative is {self.speculative!r}"
            )
        if self.deterministic and self.speculative is not None:
            raise InvalidRequestError(
                "deterministic=True decodes each sequence alone, and speculative decoding "
                "verifies drafts in batches of other shapes: leave speculative unset"
            )
        if self.deterministic and self.kv_unified:
            raise InvalidRequestError(
                "deterministic=True needs a KV stream per sequence (in a unified cache an "
                "answer depends on where other sequences' cells lie): leave kv_unified off"
            )
        if self.kv_cells is not None and not self.kv_unified:
            raise InvalidRequestError(
                "kv_cells sizes the unified KV cache: set kv_unified=True (a stream per "
                "sequence has n_ctx_per_seq cells)"
            )
        if self.tensor_split is not None and self.split_mode == "none":
            raise InvalidRequestError(
                "tensor_split shares the model between GPUs, and split_mode='none' keeps it on "
                "main_gpu alone: set one of them"
            )
        if self.flash_attention is False and self.type_v in QUANTIZED_KV_TYPES:
            raise InvalidRequestError(
                f"type_v={self.type_v!r} (a quantized V cache) needs flash attention in "
                "llama.cpp: leave flash_attention unset (None) or True, or use type_v='f16'"
            )

    @property
    def prefill_block_size(self) -> int:
        """The prefill block in use (``prefill_block``, or its default): a whole block always
        fits in a step beside every sequence's next token, so no prompt waits forever."""
        if self.prefill_block is not None:
            return self.prefill_block
        return max(1, min(DEFAULT_PREFILL_BLOCK, self.n_batch - self.n_seq_max))

    @property
    def prefill_step_tokens(self) -> int:
        """Prompt tokens one step may read while others generate (``prefill_per_step``
        resolved): never less than a block, so a prompt always moves on."""
        if not self.prefill_per_step:
            return self.n_batch
        return min(self.n_batch, max(self.prefill_per_step, self.prefill_block_size))

    def _check_choices(self) -> None:
        choices: dict[str, tuple[object, tuple[object, ...]]] = {
            "type_k": (self.type_k, get_args(KvCacheType)),
            "type_v": (self.type_v, get_args(KvCacheType)),
            "split_mode": (self.split_mode, get_args(SplitMode)),
            "rope_scaling_type": (self.rope_scaling_type, (None, *get_args(RopeScaling))),
            "embedding_pooling": (self.embedding_pooling, get_args(Pooling)),
            "speculative": (self.speculative, (None, *get_args(Speculative))),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                shown = ", ".join(repr(a) for a in allowed)
                raise InvalidRequestError(f"{name} must be one of {shown}; got {value!r}")

    def flash_attention_for(self, n_gpu_layers: int) -> bool | None:
        """``flash_attention`` resolved for weights with ``n_gpu_layers`` offloaded: a bool, or
        ``None`` for llama.cpp's own choice.

        A quantized V cache turns it on (llama.cpp refuses one without flash attention)."""
        if self.flash_attention is None and self.type_v in QUANTIZED_KV_TYPES:
            return True
        if self.flash_attention is None and n_gpu_layers == 0:
            # Off on the CPU for a stream per sequence; on for a unified cache, where it skips
            # other sequences' cells instead of attending over them.
            return self.kv_unified
        return self.flash_attention

    @property
    def weights(self) -> WeightsKey:
        """The weights this configuration loads (call on a ``resolved()`` configuration)."""
        assert self.model is not None, "resolve the configuration first"
        return WeightsKey(
            self.model,
            self.n_gpu_layers,
            self.use_mmap,
            self.weight_repacking,
            use_mlock=self.use_mlock,
            main_gpu=self.main_gpu,
            tensor_split=self.tensor_split,
            split_mode=self.split_mode,
        )

    @property
    def threads(self) -> int:
        """``n_threads`` resolved: ``None`` is this process's ``CpuBudget.threads``."""
        return self.n_threads or read_cpu_budget().threads

    def resolved(self) -> EngineConfig:
        """The same settings with ``model``, ``mmproj`` and ``speculative_draft_model`` as
        absolute local paths.

        Downloads ``hf://`` files not cached yet; raises ``InvalidRequestError`` or
        ``ModelLoadError`` for what cannot be found.
        """
        path = resolve_model_path(self.model)
        mmproj = (
            None
            if self.mmproj is None
            else str(resolve_mmproj_path(self.mmproj, model=self.model, model_path=path))
        )
        adapters = tuple(
            replace(a, path=str(resolve_model_path(a.path))) for a in self.lora_adapters
        )
        draft = self.speculative_draft_model
        if draft is not None:
            draft = str(resolve_model_path(draft))
        return replace(
            self,
            model=str(path),
            mmproj=mmproj,
            lora_adapters=adapters,
            speculative_draft_model=draft,
        )
