"""The engine's flags (``llamacpp_integrations.engine_flags``): one per ``EngineConfig`` field,
the same on ``serve``, ``chat`` and ``doctor``, read as llama-server spells them, refused
together where the engine cannot run them (before anything loads), and the server guide's
table rendered from them."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from llamacpp_integrations.cli import build_parser, main, serve_config
from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine_flags import (
    ENGINE_FLAGS,
    engine_config,
    field_docs,
    flag_help,
    flags_table,
)
from llamacpp_integrations.errors import InvalidRequestError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import figures

ROOT = Path(__file__).resolve().parents[2]
SERVER_GUIDE = ROOT / "docs" / "guides" / "server.md"


def _serve(*flags: str) -> EngineConfig:
    return serve_config(build_parser().parse_args(["serve", "m.gguf", *flags]))


def test_every_field_but_the_model_has_a_flag_and_every_flag_a_field() -> None:
    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    flagged = {flag.field for flag in ENGINE_FLAGS}
    assert flagged <= fields
    assert fields - flagged == {"model"}
    names = [name for flag in ENGINE_FLAGS for name in flag.names]
    assert len(names) == len(set(names))
    for flag in ENGINE_FLAGS:
        assert flag.needs is None or flag.needs in flagged


def test_help_is_the_field_documentation_unless_the_flag_says_otherwise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = field_docs()
    assert set(docs) == {f.name for f in dataclasses.fields(EngineConfig)}
    main_gpu = next(f for f in ENGINE_FLAGS if f.field == "main_gpu")
    assert flag_help(main_gpu) == "The GPU that holds the whole model when `split_mode` is `none`."
    assert all(flag_help(flag) for flag in ENGINE_FLAGS)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["doctor", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--n-gpu-layers N/all/auto, -ngl N/all/auto, --gpu-layers N/all/auto" in text
    assert "The GPU that holds the whole model when split_mode is none." in text
    assert "(default here: 4096)" in text  # doctor's own context


def test_the_server_guide_table_is_the_one_the_code_renders() -> None:
    page = SERVER_GUIDE.read_text(encoding="utf-8")
    block = re.search(r"<!--table engine_flags-->\n(.*?)\n<!--/table-->", page, re.DOTALL)
    assert block is not None, "docs/guides/server.md lost its engine_flags table"
    assert block.group(1) == flags_table()
    assert figures.render_table("engine_flags", {}) == flags_table()  # what make figures writes
    for flag in ENGINE_FLAGS:
        assert f"`{flag.field}`" in block.group(1)


def test_each_new_flag_reaches_the_configuration(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}", encoding="utf-8")
    config = _serve(
        *("--n-gpu-layers", "all", "-mg", "1", "--split-mode", "row", "-ts", "3/1"),
        *("-fa", "on", "-ctk", "q8_0", "--type-v", "q4_0", "--no-mmap", "--mlock", "--repack"),
        *("--kv-memory-budget", "512M", "--batch-size", "256", "--prefill-block", "32"),
        *("--prefill-per-step", "64", "--no-prefix-sharing", "--spec-type", "draft"),
        *("-md", "d.gguf", "--spec-draft-n-max", "4", "--spec-ngram-size", "4"),
        *("--spec-max-batch", "3", "--spec-grammar", "--prompt-cache-dir", str(tmp_path)),
        *("--prompt-cache-max-bytes", "1G", "--prompt-cache-min-tokens", "64"),
        *("--rope-freq-base", "20000", "--rope-freq-scale", "0.5", "--rope-scaling", "yarn"),
        *("--yarn-orig-ctx", "4096", "--yarn-ext-factor", "0.5", "--yarn-attn-factor", "1.5"),
        *("--yarn-beta-fast", "16", "--yarn-beta-slow", "2", "--lora", "a.gguf,b.gguf"),
        *("--lora-scaled", "c.gguf:0.5", "--chat-template-file", str(template)),
        *("--pooling", "mean", "--embedding-ctx", "1024", "--embedding-batch", "16"),
    )
    expected: dict[str, Any] = {
        "n_gpu_layers": -1,
        "main_gpu": 1,
        "split_mode": "row",
        "tensor_split": (3.0, 1.0),
        "flash_attention": True,
        "type_k": "q8_0",
        "type_v": "q4_0",
        "use_mmap": False,
        "use_mlock": True,
        "weight_repacking": True,
        "kv_memory_budget": 512 * 2**20,
        "n_batch": 256,
        "prefill_block": 32,
        "prefill_per_step": 64,
        "prefix_sharing": False,
        "speculative": "draft",
        "speculative_draft_model": "d.gguf",
        "speculative_max_draft": 4,
        "speculative_ngram_size": 4,
        "speculative_max_batch": 3,
        "speculative_grammar": True,
        "prompt_cache_dir": str(tmp_path),
        "prompt_cache_max_bytes": 2**30,
        "prompt_cache_min_tokens": 64,
        "rope_freq_base": 20000.0,
        "rope_freq_scale": 0.5,
        "rope_scaling_type": "yarn",
        "yarn_orig_ctx": 4096,
        "yarn_ext_factor": 0.5,
        "yarn_attn_factor": 1.5,
        "yarn_beta_fast": 16.0,
        "yarn_beta_slow": 2.0,
        "chat_template": "{{ messages }}",
        "embedding_pooling": "mean",
        "embedding_n_ctx": 1024,
        "embedding_n_seq_max": 16,
    }
    assert {name: getattr(config, name) for name in expected} == expected
    assert [(a.path, a.scale) for a in config.lora_adapters] == [
        ("a.gguf", 1.0),
        ("b.gguf", 1.0),
        ("c.gguf", 0.5),
    ]
    assert _serve("--deterministic", "--no-repack", "-ngl", "auto", "-fa", "off").deterministic
    plain = _serve("--no-repack", "-ngl", "7", "-fa", "auto")
    assert (plain.weight_repacking, plain.n_gpu_layers, plain.flash_attention) == (False, 7, None)


def test_flags_left_out_keep_each_commands_defaults() -> None:
    assert _serve() == EngineConfig(model="m.gguf")
    parser = build_parser()
    chat = parser.parse_args(["chat", "--model", "m.gguf"])
    assert engine_config(chat, "chat", model="m.gguf", n_seq_max=1).n_seq_max == 1
    doctor = parser.parse_args(["doctor", "m.gguf", "--slots", "2", "-ngl", "0"])
    config = engine_config(doctor, "doctor", model="m.gguf", n_seq_max=1, n_ctx_per_seq=4096)
    assert (config.n_seq_max, config.n_ctx_per_seq, config.n_gpu_layers) == (2, 4096, 0)
    # doctor's --chat-template is the template it checks, not the engine's
    with pytest.raises(SystemExit):
        parser.parse_args(["doctor", "m.gguf", "--chat-template-file", "t.jinja"])
    checked = parser.parse_args(["doctor", "m.gguf", "--chat-template", "t.jinja"])
    assert engine_config(checked, "doctor", model="m.gguf").chat_template is None


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--spec-draft-model", "d.gguf"], "--spec-draft-model does nothing without --spec-type"),
        (["--spec-grammar"], "--spec-grammar does nothing without --spec-type"),
        (["--spec-type", "draft"], "needs a draft model"),
        (["--spec-type", "ngram", "-md", "d.gguf"], "--spec-type, --spec-draft-model"),
        (["--prompt-cache-min-tokens", "9"], "without --prompt-cache-dir"),
        (["--split-mode", "none", "--tensor-split", "3,1"], "--split-mode, --tensor-split"),
        (["--cache-type-v", "q8_0", "--flash-attn", "off"], "--flash-attn, --cache-type-v"),
        (["--kv-cells", "4096"], "--kv-cells"),
        (["--deterministic", "--spec-type", "ngram"], "--deterministic, --spec-type"),
        (["--deterministic", "--unified-kv"], "--unified-kv, --deterministic"),
        (["--batch-size", "-1"], "n_batch (set by --batch-size)"),
        (["--slots", "0"], "n_seq_max (set by --slots)"),
        (["--prefill-block", "600"], "prefill_block (set by --prefill-block)"),
    ],
)
def test_settings_that_cannot_be_combined_are_refused_naming_the_flags(
    flags: list[str], named: str
) -> None:
    with pytest.raises(InvalidRequestError, match=re.escape(named)):
        _serve(*flags)


def test_serve_reports_a_refused_combination_before_loading(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("llamacpp_integrations.engine.shared_engine", never)
    assert main(["serve", "m.gguf", "-sm", "none", "-ts", "1,1"]) == 1
    assert "tensor_split" in capsys.readouterr().err
    assert main(["chat", "--model", "m.gguf", "--spec-ngram-size", "4"]) == 1
    assert "--spec-ngram-size does nothing without --spec-type" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags",
    [
        ["--n-gpu-layers", "-1"],  # llama-server's auto, our all: refused, not guessed
        ["--n-gpu-layers", "many"],
        ["--tensor-split", "3,x"],
        ["--split-mode", "tensor"],
        ["--flash-attn", "maybe"],
        ["--cache-type-k", "q2_k"],
        ["--kv-memory-budget", "lots"],
        ["--lora-scaled", "a.gguf"],
        ["--main-gpu", "-1"],
        ["--chat-template-file", "/nonexistent/t.jinja"],
    ],
)
def test_a_value_that_cannot_be_read_is_a_usage_error(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", "m.gguf", *flags])
    assert exit_.value.code == 2
    assert flags[0] in capsys.readouterr().err


def test_sizes_and_splits_read_as_llama_server_writes_them() -> None:
    assert _serve("--kv-memory-budget", "1536").kv_memory_budget == 1536
    assert _serve("--kv-memory-budget", "1.5G").kv_memory_budget == 3 * 2**29
    assert _serve("--prompt-cache-dir", "d", "--prompt-cache-max-bytes", "64MiB") == _serve(
        "--prompt-cache-dir", "d", "--prompt-cache-max-bytes", str(64 * 2**20)
    )
    assert _serve("-ts", "1,0,2").tensor_split == (1.0, 0.0, 2.0)
    assert _serve("--parallel", "3").n_seq_max == _serve("-np", "3").n_seq_max == 3
