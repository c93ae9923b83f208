"""``serve`` started once with every engine flag that issue 41 added, each at a value this CPU
can run that is not the default (no layer offloaded), and each read back from the engine it
serves; the server answers over HTTP with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from llamacpp_integrations.cli import main
from llamacpp_integrations.engine import InferenceEngine
from tests.builders.tiny_lora import cached_tiny_lora
from tests.integration.serve_helpers import running_server

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_serve_runs_with_every_engine_flag_and_the_engine_has_each(
    smollm_path: Path,
    projector: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lora = cached_tiny_lora()
    template = tmp_path / "chatml.jinja"
    template.write_text(TEMPLATE, encoding="utf-8")
    cache = tmp_path / "prompts"
    served: dict[str, Any] = {}

    def serve(engine: InferenceEngine | None, **options: Any) -> None:
        """The real app on a loopback port instead of ``serve``'s uvicorn.run (which would
        block until a signal): one chat over HTTP, then the engine is closed as serve does."""
        for name in ("host", "port", "grace_period", "log_level"):
            options.pop(name)
        assert engine is not None
        served["engine"] = engine
        served["config"] = engine.config  # type: ignore[attr-defined]
        served["n_ctx_per_seq"] = engine.info.n_ctx_per_seq
        served["images"] = engine.info.supports_images
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        try:
            with running_server(engine, **options) as url:
                served["answer"] = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        finally:
            engine.close()

    monkeypatch.setattr("llamacpp_integrations.server.serve", serve)
    smol = str(smollm_path)
    argv = [
        *("serve", smol, "--port", "1", "--log-level", "warning"),
        *("--n-gpu-layers", "0", "--main-gpu", "1", "--split-mode", "row"),
        *("--tensor-split", "3,1", "--flash-attn", "on", "--cache-type-k", "q8_0"),
        *("--cache-type-v", "q4_0", "--no-mmap", "--mlock", "--no-repack"),
        *("--kv-memory-budget", "64M", "--threads", "1", "--slots", "2", "--ctx", "512"),
        *("--kv-start-cells", "256", "--batch-size", "256", "--prefill-block", "32"),
        *("--prefill-per-step", "64", "--max-queued", "16", "--no-idle-realign"),
        *("--no-prefix-sharing", "--spec-type", "draft", "--spec-draft-model", smol),
        *("--spec-draft-n-max", "4", "--spec-ngram-size", "4", "--spec-max-batch", "4"),
        *("--spec-grammar", "--prompt-cache-dir", str(cache)),
        *("--prompt-cache-max-bytes", "64M", "--prompt-cache-min-tokens", "64"),
        *("--rope-freq-base", "20000", "--rope-freq-scale", "0.5", "--rope-scaling", "yarn"),
        *("--yarn-orig-ctx", "2048", "--yarn-ext-factor", "0.5", "--yarn-attn-factor", "1.5"),
        *("--yarn-beta-fast", "16", "--yarn-beta-slow", "2", "--mmproj", str(projector)),
        *("--lora", str(lora), "--lora-scaled", f"{lora}:0.5"),
        *("--chat-template-file", str(template), "--pooling", "mean"),
        *("--embedding-ctx", "1024", "--embedding-batch", "16"),
    ]
    assert main(argv) == 0
    config = served["config"]
    expected: dict[str, Any] = {
        "n_gpu_layers": 0,
        "main_gpu": 1,
        "split_mode": "row",
        "tensor_split": (3.0, 1.0),
        "flash_attention": True,
        "type_k": "q8_0",
        "type_v": "q4_0",
        "use_mmap": False,
        "use_mlock": True,
        "weight_repacking": False,
        "kv_memory_budget": 64 * 2**20,
        "n_threads": 1,
        "n_seq_max": 2,
        "n_ctx_per_seq": 512,
        "kv_start_cells": 256,
        "n_batch": 256,
        "prefill_block": 32,
        "prefill_per_step": 64,
        "max_queued": 16,
        "realign_when_idle": False,
        "prefix_sharing": False,
        "speculative": "draft",
        "speculative_draft_model": str(smollm_path.resolve()),
        "speculative_max_draft": 4,
        "speculative_ngram_size": 4,
        "speculative_max_batch": 4,
        "speculative_grammar": True,
        "prompt_cache_dir": str(cache),
        "prompt_cache_max_bytes": 64 * 2**20,
        "prompt_cache_min_tokens": 64,
        "rope_freq_base": 20000.0,
        "rope_freq_scale": 0.5,
        "rope_scaling_type": "yarn",
        "yarn_orig_ctx": 2048,
        "yarn_ext_factor": 0.5,
        "yarn_attn_factor": 1.5,
        "yarn_beta_fast": 16.0,
        "yarn_beta_slow": 2.0,
        "mmproj": str(projector.resolve()),
        "chat_template": TEMPLATE,
        "embedding_pooling": "mean",
        "embedding_n_ctx": 1024,
        "embedding_n_seq_max": 16,
    }
    assert {name: getattr(config, name) for name in expected} == expected
    adapters = [(Path(a.path), a.scale) for a in config.lora_adapters]
    assert adapters == [(lora.resolve(), 1.0), (lora.resolve(), 0.5)]
    # What the loaded engine made of them: the context asked for, the projector loaded.
    assert served["n_ctx_per_seq"] == 512 and served["images"] is True
    answer = served["answer"]
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["finish_reason"] in ("length", "stop")
    assert served["engine"].closed
