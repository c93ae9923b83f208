"""Every real chat template on the real model, as a LangChain user meets it (``checks.py``).

One session runs every check on every template llama.cpp ships, sixteen calls at a time on one
engine (SmolLM2-135M behind each template), and each (template, check) is a test. What the
tiny model cannot do is listed in ``KNOWN_FAILURES`` with the reason, and in the docs' table
(``docs/guides/model-templates.md``, written by ``python -m tests.conformance.table`` from the
results this session saves); a listed failure that passes on some CPU is fine.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from .checks import CHECKS, TemplateReport, checks_for, run_all
from .real_templates import ROOT, real_templates
from .table import RESULTS, documented_failures

TEMPLATES = real_templates()

KNOWN_FAILURES: dict[tuple[str, str], str] = {
    ("openai-gpt-oss-120b", check): "SmolLM2 writes a harmony message body without its channel "
    "header, so the body and its framing are answer text (a gpt-oss model writes the header)"
    for check in ("thinking on", "thinking off")
}


@pytest.fixture(scope="session")
def reports(smollm_path: Path) -> dict[str, TemplateReport]:
    done = asyncio.run(run_all(TEMPLATES, str(smollm_path)))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {r.name: {c: [o.passed, o.detail] for c, o in r.outcomes.items()} for r in done},
            indent=1,
        )
    )
    return {report.name: report for report in done}


CASES = [(name, check) for name, source in TEMPLATES.items() for check in checks_for(source)]


@pytest.mark.parametrize(("template", "check"), CASES, ids=[f"{t}-{c}" for t, c in CASES])
def test_template_check(reports: dict[str, TemplateReport], template: str, check: str) -> None:
    outcome = reports[template].outcomes[check]
    if not outcome.passed and (template, check) in KNOWN_FAILURES:
        pytest.xfail(KNOWN_FAILURES[(template, check)])
    assert outcome.passed, outcome.detail


def test_every_check_is_known() -> None:
    assert {check for _, check in KNOWN_FAILURES} <= set(CHECKS)
    assert {name for name, _ in KNOWN_FAILURES} <= set(TEMPLATES)


def test_the_docs_list_the_known_failures() -> None:
    """The docs' table marks as failing exactly what this suite lets fail."""
    page = ROOT / "docs" / "guides" / "model-templates.md"
    assert documented_failures(page.read_text(encoding="utf-8")) == set(KNOWN_FAILURES)
