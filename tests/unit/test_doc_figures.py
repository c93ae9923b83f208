"""The docs' figures checker (benchmarks/figures.py): a marked figure must equal its results
file's value rounded as written, a number with a unit needs a marker, a generated table must be
what its function renders now, and a results file must say where and on which commit it ran."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import figures  # noqa: E402

SERVE = {
    "levels": [
        {"server": "ours", "mode": "closed", "load": 16, "ttft_ms": {"p99": 140.0}},
        {"server": "llama-server", "mode": "closed", "load": 16, "ttft_ms": {"p99": 500.0}},
        {"server": "ours", "mode": "open", "load": 2, "ttft_ms": {"p99": 30.0}},
    ],
    "count": 1462,
    "rate": 25.2345,
}


@pytest.fixture
def results(tmp_path: Path) -> figures.Results:
    (tmp_path / "serve.json").write_text(json.dumps(SERVE))
    return figures.Results(directory=tmp_path)


def check(text: str, results: figures.Results) -> list[str]:
    return [str(p) for p in figures.process("page.md", text, results)[1]]


def test_paths_walk_keys_indexes_and_selections() -> None:
    assert figures.resolve(SERVE, "count") == 1462
    assert figures.resolve(SERVE, "levels[2].ttft_ms.p99") == 30.0
    assert figures.resolve(SERVE, "levels[server=llama-server,load=16].ttft_ms.p99") == 500.0
    # numbers compare as numbers: load=16.0 selects load 16
    assert figures.resolve(SERVE, "levels[server=ours,load=16.0].mode") == "closed"
    assert figures.resolve(SERVE, "levels[*].ttft_ms.p99") == [140.0, 500.0, 30.0]


def test_a_selection_must_match_exactly_one_item() -> None:
    with pytest.raises(figures.FigureError, match="matches 2 items"):
        figures.resolve(SERVE, "levels[server=ours].ttft_ms")
    with pytest.raises(figures.FigureError, match="matches 0 items"):
        figures.resolve(SERVE, "levels[server=nobody].ttft_ms")
    with pytest.raises(figures.FigureError, match="no key"):
        figures.resolve(SERVE, "levels[0].nothing")


def test_arithmetic_and_functions() -> None:
    ratio = "levels[server=ours,mode=closed].ttft_ms.p99 / levels[server=llama-server].ttft_ms.p99"
    assert figures.evaluate(SERVE, ratio) == pytest.approx(0.28)
    assert figures.evaluate(SERVE, "(count - 462) * 2 / 1e3") == 2.0
    assert figures.evaluate(SERVE, "-rate + 1") == pytest.approx(-24.2345)
    assert figures.evaluate(SERVE, "max(levels[*].ttft_ms.p99)") == 500.0
    assert figures.evaluate(SERVE, "min(levels[*].ttft_ms.p99)") == 30.0
    assert figures.evaluate(SERVE, "mean(levels[0].ttft_ms.p99, count)") == 801.0


@pytest.mark.parametrize(
    "expr", ["__import__('os').system('true')", "count ** 2", "levels[0].mode", "count // 2"]
)
def test_only_arithmetic_over_numbers_is_evaluated(expr: str) -> None:
    with pytest.raises(figures.FigureError):
        figures.evaluate(SERVE, expr)


def test_a_figure_is_compared_rounded_to_its_written_decimals(results: figures.Results) -> None:
    assert check("rate 25.2 texts/s<!--fig serve: rate-->", results) == []
    assert check("rate 25.23 texts/s<!--fig serve: rate-->", results) == []
    assert check("rate 25 texts/s<!--fig serve: rate-->", results) == []
    assert check("ratio **0.28x**<!--fig serve: levels[0].ttft_ms.p99 / 500-->", results) == []


def test_thousands_commas_are_read_and_kept(results: figures.Results) -> None:
    assert check("1,462<!--fig serve: count--> vectors", results) == []
    assert check("1462<!--fig serve: count--> vectors", results) == []
    text, _ = figures.process("p.md", "1,000<!--fig serve: count-->", results, write=True)
    assert text.startswith("1,462<!--")


def test_a_wrong_figure_fails_and_write_fixes_it(results: figures.Results) -> None:
    page = "ours 0.58x<!--fig serve: levels[0].ttft_ms.p99 / levels[1].ttft_ms.p99--> and 9 ms"
    page += "<!--fig serve: levels[2].ttft_ms.p99-->"
    problems = check(page, results)
    assert len(problems) == 2
    assert problems[0].startswith("page.md:1: 0.58 differs from serve")
    fixed, left = figures.process("page.md", page, results, write=True)
    assert left == []
    assert "ours 0.28x<!--fig" in fixed and " 30 ms<!--fig" in fixed
    assert check(fixed, results) == []


def test_a_marker_with_a_bad_path_or_file_fails(results: figures.Results) -> None:
    assert "no key" in check("1 ms<!--fig serve: nothing-->", results)[0]
    assert "no results file" in check("1 ms<!--fig missing: count-->", results)[0]


def test_an_unsourced_figure_fails(results: figures.Results) -> None:
    problems = check("Line one.\nIt answers in 12 ms and runs 3.5x faster at 40%.", results)
    assert len(problems) == 3
    assert all(p.startswith("page.md:2: unsourced figure") for p in problems)
    assert check("a 16x16 grid, 2026-12-01, step 3 of 4, 16 slots", results) == []


def test_given_values_code_and_comments_pass(results: figures.Results) -> None:
    page = "\n".join(
        [
            "A budget of 256 MiB<!--given--> and a timeout of **30 s**<!--given-->.",
            "Run `sleep 5 s` first.",
            "```",
            "took 12 ms",
            "```",
            "    ~~~text",
            "    1.5 GB",
            "    ~~~",
        ]
    )
    assert check(page, results) == []


def test_a_generated_block_must_be_what_its_function_renders(
    results: figures.Results, monkeypatch: pytest.MonkeyPatch
) -> None:
    def ttft(found: Any) -> str:
        return "\n".join(f"| {row['ttft_ms']['p99']:.0f} ms |" for row in found["serve"]["levels"])

    monkeypatch.setattr(figures, "_tables", lambda: SimpleNamespace(ttft=ttft))
    fresh = "Before\n<!--table ttft-->\n| 140 ms |\n| 500 ms |\n| 30 ms |\n<!--/table-->\nAfter"
    assert check(fresh, results) == []
    drifted = fresh.replace("500 ms", "510 ms")
    assert check(drifted, results) == [
        "page.md:2: table ttft differs from what figure_tables.ttft renders now "
        "(make figures rewrites it)"
    ]
    rewritten, left = figures.process("page.md", drifted, results, write=True)
    assert rewritten == fresh and left == []
    assert "never closed" in check("<!--table ttft-->\n| 1 |", results)[0]
    assert "no table" in check("<!--table nothing-->\n<!--/table-->", results)[0]


def test_a_results_file_must_say_where_when_and_on_which_commit(tmp_path: Path) -> None:
    machine = {"date": "2026-12-01", "cpu": "AMD EPYC", "cores": 2, "commit": "abc123"}
    good = {"benchmark": "good", "machine": machine, "settings": {"model": "m"}}
    (tmp_path / "good.json").write_text(json.dumps(good))
    no_commit = {**good, "machine": {k: v for k, v in machine.items() if k != "commit"}}
    (tmp_path / "no_commit.json").write_text(json.dumps(no_commit))
    (tmp_path / "bare.json").write_text(json.dumps({"benchmark": "bare"}))
    (tmp_path / "cited.json").write_text(
        json.dumps({"benchmark": "cited", "peer": {"value": 1.0, "source": "https://x"}})
    )
    problems = [str(p) for p in figures.check_results(tmp_path)]
    assert len(problems) == 4, problems
    assert any("no_commit.json:1: machine lacks commit" in p for p in problems)
    assert any("bare.json:1: no machine block" in p for p in problems)
    assert any("bare.json:1: no settings" in p for p in problems)
    assert any("cited.json:1: cited figure 'peer' lacks value/source/date" in p for p in problems)


def test_pages_are_readme_and_docs_without_the_notebook_copies(tmp_path: Path) -> None:
    for name in ("README.md", "docs/index.md", "docs/guides/a.md", "docs/notebooks/n.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    found = [p.relative_to(tmp_path).as_posix() for p in figures.pages(tmp_path)]
    assert found == ["README.md", "docs/guides/a.md", "docs/index.md"]


def test_a_results_file_written_now_passes_the_metadata_check(tmp_path: Path) -> None:
    import results

    results.write(tmp_path / "bench.json", "bench", {"model": "m"}, rows=[1])
    document = json.loads((tmp_path / "bench.json").read_text())
    assert document["machine"]["commit"]  # a hash (+dirty), or "unknown" outside git
    assert figures.check_results(tmp_path) == []


def test_a_peer_servers_command_line_is_kept_without_its_binary_port_and_model_path() -> None:
    import results

    command = ["/opt/llama-server", "-m", "/models/M.gguf", "--port", "8123", "-np", "4"]
    assert results.server_flags(command) == ["-m", "M.gguf", "-np", "4"]
    ours = ["llamacpp_integrations.cli", "serve", "/models/M.gguf", "--port", "1", "--slots", "4"]
    assert results.server_flags(ours, "/models/M.gguf") == ["serve", "M.gguf", "--slots", "4"]
