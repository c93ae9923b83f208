"""Ray Data batch jobs against the in-process engine, on this machine.

The same job three ways: ``EmbedBatches`` / ``GenerateBatches`` called in this process on one
engine with every core (``n_threads`` = the machine's cores), then through Ray Data's
``map_batches`` with one actor and with two (``num_cpus=1`` each, so one thread each). Each
Ray run's wall time includes starting its actors and loading the weights; a one-row run
measures that start alone, so the report can work out each actor's steady rate and, from it,
what N machines would do (on paper: nothing here measures more than one machine).

    python benchmarks/bench_ray.py [--texts 600] [--prompts 100] [--json results/ray_data.json]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import results

from llamacpp_integrations.models import resolve_model_path

TOPICS = ["rivers", "owls", "bread", "glass", "tides", "comets", "bees", "kites", "salt"]
BATCH = 50  # rows per batch, for every side


def corpus(n: int) -> list[dict[str, Any]]:
    return [{"text": f"A note about {TOPICS[i % len(TOPICS)]}, {i}."} for i in range(n)]


def prompts(n: int) -> list[dict[str, Any]]:
    return [{"topic": TOPICS[i % len(TOPICS)], "n": i} for i in range(n)]


def jobs(model: str, max_tokens: int) -> dict[str, tuple[type, dict[str, Any]]]:
    from llamacpp_integrations.ray import EmbedBatches, GenerateBatches

    return {
        "embeddings": (EmbedBatches, {"model": model}),
        "generation": (
            GenerateBatches,
            {
                "model": model,
                "template": "Write a short line about {topic} (line {n}).",
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "n_seq_max": 16,
            },
        ),
    }


def in_process(job: type, kwargs: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's class called here, batch after batch, on one engine with every core."""
    start = time.perf_counter()
    instance = job(**kwargs, n_threads=os.cpu_count() or 1)
    loaded = time.perf_counter()
    failed = 0
    for at in range(0, len(rows), BATCH):
        chunk = rows[at : at + BATCH]
        out = instance({key: [row[key] for row in chunk] for key in chunk[0]})
        failed += sum(error is not None for error in out["error"])
    wall = time.perf_counter() - loaded
    instance.settings.close()
    return _figures(len(rows), wall, failed, start_s=loaded - start)


def on_ray(job: type, kwargs: dict[str, Any], rows: list[dict[str, Any]], actors: int) -> Any:
    import ray

    dataset = ray.data.from_items(rows).map_batches(
        job,
        fn_constructor_kwargs=kwargs,
        batch_size=BATCH,
        # One batch in flight an actor: with Ray's default the first actor up queues both of
        # a small job's batches and the second idles.
        compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
        num_cpus=1,
    )
    start = time.perf_counter()
    out = dataset.take_all()
    wall = time.perf_counter() - start
    assert len(out) == len(rows)
    return wall, sum(row["error"] is not None for row in out)


def _figures(rows: int, wall: float, failed: int, **extra: float) -> dict[str, Any]:
    return {"rows": rows, "wall_s": wall, "rows_per_s": rows / wall, "failed": failed, **extra}


def measure(name: str, job: type, kwargs: dict[str, Any], rows: list[dict[str, Any]]) -> Any:
    local = in_process(job, kwargs, rows)
    start_s, _ = on_ray(job, kwargs, rows[:1], 1)  # one actor's start and load, one row
    sides: dict[str, Any] = {"in_process": local, "actor_start_s": start_s}
    for actors in (1, 2):
        wall, failed = on_ray(job, kwargs, rows, actors)
        sides[f"ray_{actors}"] = _figures(len(rows), wall, failed, actors=actors)
        ratio = sides[f"ray_{actors}"]["rows_per_s"] / local["rows_per_s"]
        print(f"{name}: {actors} actor(s) {ratio:.2f}x the in-process rate ({wall:.1f} s)")
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--texts", type=int, default=600)
    parser.add_argument("--prompts", type=int, default=100)  # two batches: one per actor
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    model = str(resolve_model_path(args.model))
    work: dict[str, Callable[[], list[dict[str, Any]]]] = {
        "embeddings": lambda: corpus(args.texts),
        "generation": lambda: prompts(args.prompts),
    }
    import ray

    cores = os.cpu_count() or 1
    # Other work on the machine moves every figure here: the run says how busy it was.
    load_at_start = os.getloadavg()[0]
    start = time.perf_counter()
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    init_s = time.perf_counter() - start
    try:
        found = {
            name: measure(name, job, kwargs, work[name]())
            for name, (job, kwargs) in jobs(model, args.max_tokens).items()
        }
    finally:
        ray.shutdown()
    results.write(
        args.json,
        "ray_data",
        {
            "model": model,
            "threads": cores,
            "texts": args.texts,
            "prompts": args.prompts,
            "max_tokens": args.max_tokens,
            "batch_size": BATCH,
            "ray": ray.__version__,
            "in_process": f"the batch class called in one process, n_threads={cores}",
            "actors": (
                "ActorPoolStrategy(size=1 or 2, max_tasks_in_flight_per_actor=1), "
                "num_cpus=1 each (one thread each)"
            ),
        },
        ray_init_s=init_s,
        load_average={"start": load_at_start, "end": os.getloadavg()[0]},
        **found,
    )


if __name__ == "__main__":
    main()
