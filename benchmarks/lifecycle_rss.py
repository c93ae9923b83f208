"""Memory a model takes and gives back: RSS before loading, loaded (after a first answer, so
the KV cache is allocated), and after the adapter is closed.

One fresh process per model (``--child``), so that nothing else in it holds the weights. With
each adapter's default settings: the context per sequence is what the engine chose, which the
output shows. Nothing is asserted here; ``tests/integration/test_lifecycle.py`` runs the same
child and checks that the memory comes back.

Run from the repository root, with ``LLAMACPP_INTEGRATIONS_MODELS`` pointing at the models::

    python benchmarks/lifecycle_rss.py [--models smollm2-135m,gemma3-270m] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import results

MiB = 1024**2
ADAPTER = "ChatLlamaCpp with its default settings, temperature 0"
MAX_TOKENS = 8
PROMPT = "Hello"


def rss_bytes() -> int:
    """Resident memory of this process, from ``/proc/self/status`` (``VmRSS``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def mappings(path: str) -> int:
    """How many regions of ``path`` this process maps."""
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        return sum(1 for line in maps if line.rstrip().endswith(path))


def measure(model: str) -> dict[str, Any]:
    """Load ``model`` through ``ChatLlamaCpp``, generate once, close; RSS at each point."""
    from llamacpp_integrations.engine import CompletionRequest, live_engines
    from llamacpp_integrations.langchain import ChatLlamaCpp
    from llamacpp_integrations.models import resolve_model_path

    path = str(resolve_model_path(model).resolve())
    before = rss_bytes()
    with ChatLlamaCpp(model=model, temperature=0, max_tokens=MAX_TOKENS) as llm:
        engine = llm.binding.get()
        # Raw text: one of the test models has no chat template.
        engine.generate(CompletionRequest(prompt=PROMPT, max_tokens=MAX_TOKENS))
        loaded = rss_bytes()
        info = engine.info
        mapped = mappings(path)
    after = rss_bytes()
    return {
        "model": model,
        "n_ctx_per_seq": info.n_ctx_per_seq,
        "context_reason": info.context_reason,
        "rss_before": before,
        "rss_loaded": loaded,
        "rss_after_close": after,
        "mapped_while_loaded": mapped,
        "mapped_after_close": mappings(path),
        "engine_closed": engine.closed,
        "live_engines_after_close": len(live_engines()),
    }


def run_child(model: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", model],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the child for {model} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    rows = [run_child(model) for model in args.models.split(",")]
    print("| model | context per sequence | RSS before | loaded | after close |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['model']} | {row['n_ctx_per_seq']} | {row['rss_before'] / MiB:.0f} MiB "
            f"| {row['rss_loaded'] / MiB:.0f} MiB | {row['rss_after_close'] / MiB:.0f} MiB |"
        )
    # With the machine and commit measured (results.write), as every results file.
    settings = {
        "models": args.models.split(","),
        "adapter": ADAPTER,
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
    }
    results.write(args.json, "lifecycle_rss", settings, runs=rows)


if __name__ == "__main__":
    main()
