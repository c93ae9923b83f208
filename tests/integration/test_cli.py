"""The command line on the real model."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from llamacpp_integrations.cli import main


def test_info_prints_the_metadata(smollm_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--model", str(smollm_path)]) == 0
    out = capsys.readouterr().out
    assert "llama" in out and "576" in out and "chat template: yes" in out


def test_demo_shows_a_tool_chain_rag_and_batching(
    smollm_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--model", str(smollm_path), "--max-tokens", "12"]) == 0
    out = capsys.readouterr().out
    assert "tool call (grammar-constrained): get_weather({'city':" in out
    assert "retrieved: The Zorblax fruit" in out
    assert "one after another" in out and "together (one batch)" in out
    assert "speed-up from batching" in out
    assert out.rstrip().endswith("loaded copies of the weights: 1")


def test_chat_reads_turns_until_an_empty_line(
    smollm_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = iter(["Hello!", "And again?", ""])
    monkeypatch.setattr("builtins.input", lambda _prompt="": next(lines))
    assert main(["chat", "--model", str(smollm_path), "--max-tokens", "8"]) == 0
    assert "chatting with" in capsys.readouterr().out


def test_errors_are_reported_not_raised(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--model", "/nonexistent/model.gguf"]) == 1
    assert "error:" in capsys.readouterr().err


def test_chat_with_an_image(
    smollm_path: Path,
    projector: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    picture = tmp_path / "picture.png"
    Image.new("RGB", (40, 30), (200, 40, 40)).save(picture)
    lines = iter(["What is this?", ""])
    monkeypatch.setattr("builtins.input", lambda _prompt="": next(lines))
    argv = ["chat", "--model", str(smollm_path), "--mmproj", str(projector)]
    assert main([*argv, "--image", str(picture), "--max-tokens", "4"]) == 0
    assert "chatting with" in capsys.readouterr().out
    # Without a projector the image is refused, as an error message.
    assert main(["chat", "--model", str(smollm_path), "--image", str(picture)]) == 1
    assert "projector" in capsys.readouterr().err


def test_serve_kv_layout_options_reach_the_engine_configuration() -> None:
    from llamacpp_integrations.cli import build_parser, serve_config

    default = serve_config(build_parser().parse_args(["serve", "m.gguf"]))
    assert not default.kv_unified and default.kv_cells is None
    unified = ["serve", "--unified-kv", "--kv-cells", "4096", "--slots", "4"]
    sized = serve_config(build_parser().parse_args(unified))
    assert (sized.kv_cells, sized.n_seq_max, sized.kv_unified) == (4096, 4, True)
