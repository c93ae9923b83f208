"""The docs' table of template conformance, written from a test session's results.

``tests/conformance/test_answers.py`` saves what each check gave (``RESULTS``); running this
module puts the table between the markers of ``docs/guides/model-templates.md``:

    python -m tests.conformance.table
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .checks import CHECKS
from .real_templates import ROOT, llama_cpp_version

RESULTS = ROOT / ".cache" / "conformance" / "results.json"
PAGE = ROOT / "docs" / "guides" / "model-templates.md"
START, END = "<!-- conformance table: start -->", "<!-- conformance table: end -->"
PASSED, FAILED, NOT_RUN = "✓", "✗", "·"


def render(results: dict[str, dict[str, list[object]]], reasons: dict[tuple[str, str], str]) -> str:
    """The table (a row per template, a column per check) and each failure's reason."""
    checks = list(CHECKS)
    lines = [
        f"Templates of llama-cpp-python {llama_cpp_version()}'s llama.cpp, each on "
        "SmolLM2-135M. "
        f"{PASSED} passed, {FAILED} failed (reasons below), {NOT_RUN} not run (no reasoning "
        "format).",
        "",
        "| template | " + " | ".join(checks) + " |",
        "|---|" + "---|" * len(checks),
    ]
    failures = []
    for name in sorted(results):
        cells = []
        for check in checks:
            outcome = results[name].get(check)
            if outcome is None:
                cells.append(NOT_RUN)
            elif outcome[0]:
                cells.append(PASSED)
            else:
                cells.append(FAILED)
                failures.append((name, check))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Failures:" if failures else "No failures.", ""]
    for name, check in failures:
        reason = reasons.get((name, check), str(results[name][check][1]))
        lines.append(f"- {name}, {check}: {reason}")
    return "\n".join(lines)


def documented_failures(page: str) -> set[tuple[str, str]]:
    """The (template, check) pairs the page's table marks as failed."""
    body = page.split(START, 1)[1].split(END, 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ") and FAILED in line]
    header = next(line for line in body.splitlines() if line.startswith("| template |"))
    checks = [cell.strip() for cell in header.strip("|").split("|")][1:]
    failed = set()
    for row in rows:
        name, *cells = (cell.strip() for cell in row.strip("|").split("|"))
        failed |= {
            (name, check) for check, cell in zip(checks, cells, strict=True) if cell == FAILED
        }
    return failed


def write(page: Path = PAGE) -> None:
    from .test_answers import KNOWN_FAILURES  # the reasons live beside the suite

    results = json.loads(RESULTS.read_text(encoding="utf-8"))
    text = page.read_text(encoding="utf-8")
    table = render(results, KNOWN_FAILURES)
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.DOTALL)
    page.write_text(pattern.sub(lambda _: f"{START}\n{table}\n{END}", text), encoding="utf-8")


if __name__ == "__main__":
    if not RESULTS.exists():
        sys.exit(f"no results at {RESULTS}: run pytest tests/conformance first")
    write()
