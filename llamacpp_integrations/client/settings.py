"""The settings every adapter exposes, declared once: pydantic mixins the adapters inherit.

* ``EngineSettings``: one optional field per ``EngineConfig`` serving or weights setting, made
  from the dataclass itself (names, types and the descriptions in its docstring), so a setting
  added to the engine appears in every adapter with nothing written twice. ``None`` means the
  engine's default; only the settings a user sets reach the registry, so adapters that set
  nothing share one engine. Its ``binding`` (``EngineBound``) reaches that engine.
* ``SamplingSettings``: one field per ``SamplingParams`` field, with its defaults.
* ``CallSettings``: per-request settings both chat adapters take (timeout, log-probabilities,
  chat template, image policy).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any, Self, get_type_hints

from pydantic import BaseModel, Field, PrivateAttr, SecretStr, create_model, model_validator

from ..engine import EngineConfig, InferenceEngine, SamplingParams
from ..engine.config import (
    KvCacheType,
    LoraAdapter,
    Pooling,
    RopeScaling,
    Speculative,
    SplitMode,
)
from ..models.resolve import model_spec
from ..models.stores import store_defaults
from ..multimodal import DEFAULT_IMAGE_POLICY, ImagePolicy
from .binding import EngineBinding

__all__ = [
    "ENGINE_SETTINGS",
    "SAMPLING_SETTINGS",
    "CallSettings",
    "EngineBound",
    "EngineSettings",
    "SamplingSettings",
    "engine_settings_of",
]

# ``model`` is every adapter's own field; an adapter's ``chat_template`` applies per request.
ENGINE_SETTINGS = tuple(
    f.name for f in fields(EngineConfig) if f.name not in ("model", "chat_template")
)
SAMPLING_SETTINGS = tuple(f.name for f in fields(SamplingParams))


def attribute_docs(cls: type) -> dict[str, str]:
    """The ``Attributes:`` entries of a class docstring, as one line of text per name."""
    docs: dict[str, str] = {}
    section = (cls.__doc__ or "").partition("Attributes:")[2]
    current: str | None = None
    for line in section.splitlines():
        entry = re.match(r"^\s{4,8}(\w+): (.*)$", line)
        if entry and entry.group(1) in {f.name for f in fields(cls)}:
            current = entry.group(1)
            docs[current] = entry.group(2).strip()
        elif current is not None and line.strip():
            docs[current] += " " + line.strip()
        elif not line.strip() and current is not None and docs[current].endswith("."):
            current = None
    return docs


def _optional_fields_of(cls: type, names: tuple[str, ...]) -> dict[str, Any]:
    hints = get_type_hints(cls)
    docs = attribute_docs(cls)
    return {
        name: (hints[name] | None, Field(default=None, description=docs.get(name)))
        for name in names
    }


def _sampling_fields() -> dict[str, Any]:
    hints = get_type_hints(SamplingParams)
    docs = attribute_docs(SamplingParams)
    out: dict[str, Any] = {}
    for field in fields(SamplingParams):
        assert field.default is not MISSING
        out[field.name] = (
            hints[field.name],
            Field(default=field.default, description=docs.get(field.name)),
        )
    return out


def engine_settings_of(
    adapter: BaseModel, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The engine settings a user set on ``adapter`` (plus ``extra``, e.g. ``engine_kwargs``),
    over those the model's store implies (an ``ollama://`` model's projector and ``num_ctx``)."""
    chosen = {
        name: getattr(adapter, name)
        for name in ENGINE_SETTINGS
        if name in adapter.model_fields_set and getattr(adapter, name) is not None
    }
    stored: dict[str, Any] = {}
    if getattr(adapter, "base_url", None) is None:
        implied = store_defaults(model_spec(getattr(adapter, "model", None))).engine
        # A setting the user named, even as None (mmproj=None: no projector), is theirs.
        stored = {k: v for k, v in implied.items() if k not in adapter.model_fields_set}
    return stored | chosen | dict(extra or {})


class EngineBound(BaseModel):
    """An adapter bound to an engine by its settings: they are checked at construction, and
    ``binding`` reaches the engine they name.

    ``close()`` (or leaving a ``with`` block) lets go of the engine: the last adapter holding
    it unloads it and frees its memory, at once or ``keep_alive`` seconds later. A closed
    adapter loads again if it is called again.
    """

    keep_alive: float | None = Field(
        default=None,
        description="Seconds the engine stays loaded after the last adapter using it closes "
        "(or is collected), in case another takes it; None or 0 unloads at once, -1 keeps it "
        "until llamacpp_integrations.engine.registry.unload_kept_engines().",
    )

    base_url: str | list[str] | None = Field(
        default=None,
        description="A llama.cpp llama-server to serve from instead of a local model (its URL, "
        "or a list of URLs for a fleet; it may carry a reverse proxy's path); the engine "
        "settings are then unused, and model names the model of a router (a server started "
        "over --models-dir or --models-preset). Needs the remote extra (httpx).",
    )
    embeddings_url: str | None = Field(
        default=None,
        description="With base_url: the llama-server started with --embeddings that serves "
        "embeddings (default: base_url).",
    )
    api_key: SecretStr | None = Field(
        default=None,
        exclude=True,
        description="With base_url: the llama-server's API key (sent as a bearer token); a "
        "local model needs none.",
    )
    allow_untested_build: bool = Field(
        default=False,
        description="Deprecated, no longer needed: every llama-server build is used, and what "
        "is sent is decided from what the server reports about itself. Accepted and ignored.",
    )

    _binding: EngineBinding | None = PrivateAttr(default=None)
    _remote: InferenceEngine | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _engine_settings_are_valid(self) -> Self:
        # EngineConfig holds the one copy of the rules; building it loads nothing.
        try:
            EngineConfig(**self._engine_settings())
        except TypeError as error:  # a name EngineConfig does not have (engine_kwargs)
            raise ValueError(f"unknown engine setting: {error}") from None
        return self

    def _supplied_engine(self) -> InferenceEngine | None:
        """An engine the user passed in, to serve from instead of the registry's."""
        return None

    def _remote_engine(self) -> InferenceEngine | None:
        """The llama-server (or fleet) ``base_url`` names, made once (nothing is sent yet)."""
        if self.base_url is None:
            return None
        if self._remote is None:
            self._remote = self._connect(getattr(self, "model", None))
        return self._remote

    def _connect(self, model: str | None) -> InferenceEngine:
        """An engine over ``base_url`` that names ``model`` to the server (a router routes by
        it; a one-model server serves its own model whatever is named)."""
        from ..remote import connect  # httpx only when a server is named

        assert self.base_url is not None
        return connect(
            self.base_url, embeddings_url=self.embeddings_url, api_key=self.api_key, model=model
        )

    def _engine_settings(self) -> dict[str, Any]:
        """The ``EngineConfig`` settings this adapter asks for."""
        return engine_settings_of(self)

    @property
    def binding(self) -> EngineBinding:
        """How this adapter reaches its engine (made from its fields on first use)."""
        if self._binding is None:
            self._binding = EngineBinding(
                model=getattr(self, "model", None),
                settings=self._engine_settings(),
                engine=self._supplied_engine() or self._remote_engine(),
                keep_alive=self.keep_alive,
                routed=None if self.base_url is None else self._connect,
            )
        return self._binding

    def close(self) -> None:
        """Let go of the engine (see the class docstring); an engine passed in stays open."""
        if self._binding is not None:
            self._binding.close()

    async def aclose(self) -> None:
        """``close`` for async code (it does not block: unloading happens on the worker)."""
        self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:
    # At run time the fields below are made from EngineConfig and SamplingParams (the branch
    # after this one); type checkers need them written out. tests/unit/test_settings.py checks
    # that these declarations match the dataclasses, so they cannot drift.

    class EngineSettings(EngineBound):
        """Optional ``EngineConfig`` settings (``None``: the engine's default)."""

        mmproj: str | None = None
        n_seq_max: int | None = None
        n_ctx_per_seq: int | None = None
        n_batch: int | None = None
        prefill_block: int | None = None
        prefill_per_step: int | None = None
        deterministic: bool | None = None
        realign_when_idle: bool | None = None
        prefix_sharing: bool | None = None
        n_threads: int | None = None
        n_gpu_layers: int | None = None
        kv_memory_budget: int | None = None
        flash_attention: bool | None = None
        kv_unified: bool | None = None
        kv_cells: int | None = None
        kv_start_cells: int | None = None
        use_mmap: bool | None = None
        weight_repacking: bool | None = None
        use_mlock: bool | None = None
        main_gpu: int | None = None
        tensor_split: tuple[float, ...] | None = None
        split_mode: SplitMode | None = None
        type_k: KvCacheType | None = None
        type_v: KvCacheType | None = None
        rope_freq_base: float | None = None
        rope_freq_scale: float | None = None
        rope_scaling_type: RopeScaling | None = None
        yarn_orig_ctx: int | None = None
        yarn_ext_factor: float | None = None
        yarn_attn_factor: float | None = None
        yarn_beta_fast: float | None = None
        yarn_beta_slow: float | None = None
        lora_adapters: tuple[LoraAdapter, ...] | None = None
        max_queued: int | None = None
        embedding_pooling: Pooling | None = None
        embedding_n_ctx: int | None = None
        embedding_n_seq_max: int | None = None
        speculative: Speculative | None = None
        speculative_draft_model: str | None = None
        speculative_max_draft: int | None = None
        speculative_ngram_size: int | None = None
        speculative_max_batch: int | None = None
        speculative_grammar: bool | None = None
        prompt_cache_dir: str | None = None
        prompt_cache_max_bytes: int | None = None
        prompt_cache_min_tokens: int | None = None

    class SamplingSettings(BaseModel):
        """How tokens are sampled, per ``SamplingParams`` (calls may override each)."""

        temperature: float = 0.8
        top_k: int = 40
        top_p: float = 0.95
        min_p: float = 0.05
        repeat_penalty: float = 1.0
        presence_penalty: float = 0.0
        frequency_penalty: float = 0.0
        penalty_last_n: int = 64
        logit_bias: Mapping[int, float] | None = None
        seed: int | None = None
        allow_speculation: bool = True

else:
    EngineSettings = create_model(
        "EngineSettings",
        __base__=EngineBound,
        __doc__="Optional ``EngineConfig`` settings (``None``: the engine's default).",
        **_optional_fields_of(EngineConfig, ENGINE_SETTINGS),
    )
    SamplingSettings = create_model(
        "SamplingSettings",
        __doc__="How tokens are sampled, per ``SamplingParams`` (calls may override each).",
        **_sampling_fields(),
    )


class CallSettings(BaseModel):
    """Per-request settings shared by the chat adapters; calls may override each by keyword,
    except ``image_policy``, which stays the adapter's."""

    timeout: float | None = Field(
        default=None, gt=0.0, description="Seconds a request may take from submission."
    )
    logprobs: bool | None = Field(
        default=None,
        description="Return log-probabilities of the generated tokens (each token, then the "
        "top_logprobs most likely tokens at its step).",
    )
    top_logprobs: int | None = Field(
        default=None, ge=0, le=20, description="Most likely tokens reported per step."
    )
    chat_template: str | None = Field(
        default=None, description="A Jinja chat template used instead of the GGUF's own."
    )
    reasoning_budget: int | None = Field(
        default=None,
        ge=0,
        description="Most tokens a reasoning model may think for; then the engine writes the "
        "end of its reasoning and the model answers. Does nothing for models whose template "
        "shows no reasoning format.",
    )
    allow_repeated_calls: bool = Field(
        default=False,
        description="Let the model repeat a tool call whose result it already has (same tool, "
        "same arguments). Off by default: the loop guard keeps such calls out in tool_choice "
        "'auto', so small models in agent loops answer instead of calling forever; turn it on "
        "for tools meant to be polled.",
    )
    image_policy: ImagePolicy = Field(
        default=DEFAULT_IMAGE_POLICY,
        description="Which image sources are read: by default in-memory data only (base64, "
        "data URIs); allow local directories or remote URLs here.",
    )
