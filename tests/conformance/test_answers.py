"""Real chat templates on the real model, as a LangChain user meets them (``checks.py``).

One session runs every check on the templates under test, sixteen calls at a time on one
engine (SmolLM2-135M behind each template), and each (template, check) is a test. ``make
conformance`` (``CONFORMANCE=all``) runs every template llama.cpp ships, about four minutes;
``make test`` runs few templates that between them show every tool-call style, reasoning
shape and set of polyfills (``checks.representatives``) and two more, 16 of the 70. What the
tiny model cannot do is listed in ``KNOWN_FAILURES`` with the reason, and in the docs' table
(``docs/guides/model-templates.md``, written by ``python -m tests.conformance.table`` from the
results a full run saves); a listed failure that passes on some CPU is fine.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from .checks import CHECKS, TemplateReport, checks_for, representatives, run_all
from .real_templates import ROOT, real_templates
from .table import RESULTS, documented_failures

ALL_TEMPLATES = real_templates()
FULL = os.environ.get("CONFORMANCE") == "all"
# Beside one of each kind, the templates whose fixes probes do not tell apart: firefunction's
# ``functions`` variable, Kimi K2's lists it builds and changes.
ALWAYS = ("fireworks-ai-llama-3-firefunction-v2", "Kimi-K2-Instruct")
TEMPLATES = (
    ALL_TEMPLATES
    if FULL
    else {**representatives(ALL_TEMPLATES), **{name: ALL_TEMPLATES[name] for name in ALWAYS}}
)
# Setting up runs every check of every template at once: minutes, not a test's usual seconds.
pytestmark = pytest.mark.timeout(1800)

KNOWN_FAILURES: dict[tuple[str, str], str] = {
    **{
        ("openai-gpt-oss-120b", check): "SmolLM2 writes a harmony message body without its "
        "channel header, so the body and its framing are answer text (a gpt-oss model writes "
        "the header)"
        for check in ("thinking on", "thinking off")
    },
    ("llama-cpp-rwkv-world", "thinking off"): "SmolLM2 sometimes goes on past its answer into "
    "turns it invents, copying the prompt's closed '<think>\\n</think>' into them; that is "
    "answer text (an RWKV model ends its turn)",
}


@pytest.fixture(scope="session")
def reports(smollm_path: Path) -> dict[str, TemplateReport]:
    done = asyncio.run(run_all(TEMPLATES, str(smollm_path)))
    if not FULL:
        return {report.name: report for report in done}
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
    assert {name for name, _ in KNOWN_FAILURES} <= set(ALL_TEMPLATES)


def test_the_docs_list_the_known_failures() -> None:
    """The docs' table marks as failing exactly what this suite lets fail."""
    page = ROOT / "docs" / "guides" / "model-templates.md"
    assert documented_failures(page.read_text(encoding="utf-8")) == set(KNOWN_FAILURES)
