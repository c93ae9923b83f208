"""``llamacpp-integrations doctor`` on the real models: both test models, and SmolLM2 behind
every template written for the tests (each tool-call style and each reasoning family); its
machine section on this CPU-only machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llamacpp_integrations.cli import main
from llamacpp_integrations.doctor import (
    Finding,
    diagnose,
    examine_machine,
    findings_json,
    findings_table,
)
from llamacpp_integrations.engine import Engine
from llamacpp_integrations.engine.sizing import KVShape
from llamacpp_integrations.models import read_gguf_info
from tests.builders.reasoning_templates import DETECTED
from tests.conformance.real_templates import template_dir

from .tool_templates import NATIVE_TEMPLATES, STRICT_ALTERNATION

# The findings that must come out "ok" for a model whose template works ("warn" for the
# template: it works, adapted where it refuses a conversation).
MUST_PASS = {"template", "forced call", "structured answer", "BOS"}


def _passed(found: dict[str, Finding]) -> bool:
    return found["template"].status in ("ok", "warn") and all(
        found[name].status == "ok" for name in MUST_PASS - {"template"}
    )


def _by_check(findings: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {finding["check"]: finding for finding in findings}


def _doctor_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", *args, "--json", "--max-tokens", "96"])
    return code, json.loads(capsys.readouterr().out)


def _doctor(
    capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, dict[str, dict[str, str]]]:
    code, report = _doctor_json(capsys, *args)
    return code, _by_check(report["findings"])


def test_doctor_on_smollm(capsys: pytest.CaptureFixture[str], smollm_path: Path) -> None:
    code, report = _doctor_json(capsys, str(smollm_path))
    found = _by_check(report["findings"])
    assert code == 0
    assert all(found[name]["status"] == "ok" for name in MUST_PASS), found
    assert "tokens/s" in found["speed"]["detail"]
    assert "sequences" in found["context and memory"]["detail"]
    # The machine section: a CPU build, so nothing offloaded and the KV cache in RAM, sized
    # for doctor's one sequence of 4096 tokens.
    machine = report["machine"]
    assert "CPU" in machine["backends"]
    assert [d["kind"] for d in machine["devices"]] == ["cpu"]
    assert machine["devices"][0]["free_bytes"] > 0
    header = read_gguf_info(smollm_path)
    placement = machine["placement"]
    assert placement["layers_offloaded"] == 0 and placement["n_layer"] == header.block_count
    assert placement["kv_location"] == "host"
    shape = KVShape.from_gguf(header)
    assert shape is not None
    assert placement["kv_cells"] == 4096
    assert placement["kv_bytes"] == 4096 * shape.kv_bytes_per_cell()
    assert placement["flash_attention"] is False and placement["flash_attention_set"] is None
    advice = {r["setting"]: r for r in machine["recommendations"]}
    assert advice["n_gpu_layers"]["value"] == 0
    # Doctor's engine leaves n_threads unset: the default is the advice, and what it decodes on.
    threads = advice["n_threads"]
    assert threads["value"] == threads["current"] == placement["n_threads"] >= 1
    assert threads["value"] <= machine["physical_cores"]
    assert advice["use_mmap"]["value"] is True and advice["use_mmap"]["current"] is True


def test_the_machine_section_is_what_the_engine_reports(engine: Engine) -> None:
    machine = examine_machine(engine)
    placement = machine.placement
    assert placement is not None and placement == engine.info.placement
    assert placement.kv_bytes == engine.context_choice.kv_bytes
    assert placement.kv_cells == engine.context_choice.n_cells
    assert placement.layers_offloaded == 0 and placement.kv_location == "host"
    rows = dict(machine.rows())
    assert rows["offload"].startswith(f"0 of {placement.n_layer} layers on a GPU")
    assert rows["KV cache"].startswith("in RAM (host)")
    assert rows["flash attention"].startswith("off")
    # Doctor's text: the findings, a blank line, then the section, one fact a line.
    findings = [Finding("template", "ok", "the GGUF's own")]
    lines = findings_table(findings, machine).splitlines()
    assert lines[1:3] == ["", "machine"]
    assert any(line.startswith("  offload") for line in lines)
    assert any(line.startswith("  recommended") and "n_threads=" in line for line in lines)
    assert json.loads(findings_json(findings))[0]["check"] == "template"  # no section: a list


def test_doctor_on_gemma(capsys: pytest.CaptureFixture[str], gemma_path: Path) -> None:
    # The packaged Gemma 3 270M carries no chat template: the doctor says so and exits 1,
    # with only the checks that need none.
    code, found = _doctor(capsys, str(gemma_path))
    assert code == 1
    assert (
        found["template"]["status"] == "fail" and "--chat-template" in found["template"]["detail"]
    )
    assert set(found) == {"template", "media", "context and memory"}
    # With Gemma 2's real template, which refuses system messages: adapted, and it works.
    gemma2 = template_dir() / "google-gemma-2-2b-it.jinja"
    code, found = _doctor(capsys, str(gemma_path), "--chat-template", str(gemma2))
    assert code == 0, found
    assert found["template"]["status"] == "warn" and "system_role" in found["template"]["detail"]
    assert found["BOS"]["detail"].startswith("one BOS")


@pytest.mark.parametrize("style", sorted(NATIVE_TEMPLATES))
def test_each_tool_style_is_found_and_calls(engine: Engine, style: str) -> None:
    found = {f.check: f for f in diagnose(engine, NATIVE_TEMPLATES[style], max_tokens=96)}
    assert _passed(found), found
    assert found["tool-call style"].detail == f"native: {style}"


def test_a_template_refusing_turn_orders_is_adapted(engine: Engine) -> None:
    found = {f.check: f for f in diagnose(engine, STRICT_ALTERNATION, max_tokens=96)}
    assert _passed(found), found
    assert found["tool-call style"].detail.startswith("the package's own prompt")


@pytest.mark.parametrize("family", sorted(DETECTED))
def test_each_reasoning_family_is_found_and_a_forced_answer_comes(
    engine: Engine, family: str
) -> None:
    template, format = DETECTED[family]
    found = {f.check: f for f in diagnose(engine, template, max_tokens=96)}
    assert _passed(found), found
    if format is None:
        assert found["reasoning"].status == "info"
    else:
        assert found["reasoning"].detail.startswith(f"{format.family} {format.start}")
