"""mkdocs hook: the build fails when a page's measured figure differs from its results file.

Runs ``benchmarks/figures.py``'s check over README.md, every page and the results files before
the build (the same check ``make test`` runs), so a site cannot be built with drifted figures.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def on_pre_build(config: Any) -> None:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    import figures

    problems = figures.run()
    if problems:
        listed = "\n".join(str(problem) for problem in problems)
        raise PluginError(
            f"{len(problems)} figure(s) in the docs do not come from benchmarks/results "
            f"(python benchmarks/figures.py --check; make figures rewrites them):\n{listed}"
        )
