"""``docs/benchmarks.md``'s Ray Data section, from ``benchmarks/results/ray_data.json``
(``make bench-ray``): the table of rates and ratios, and the scaling to N machines worked out
from the per-actor figures. Every number is computed here from the results file."""

from __future__ import annotations

from typing import Any

# Machines the worked example scales to (a choice of the text, not a measurement).
MACHINES = (4, 16, 64)
# The corpus size the worked example indexes (likewise a choice).
CORPUS = 1_000_000


def steady_rate(side: dict[str, Any], start_s: float) -> float:
    """Rows per second once the actors have started: the run's wall time less one actor's
    start and load (the actors of a pool start side by side)."""
    busy = max(side["wall_s"] - start_s, 1e-9)
    return float(side["rows"]) / busy


def ray_section(found: dict[str, dict[str, Any]], headline: list[str], where: Any) -> list[str]:
    document = found.get("ray_data")
    if document is None:
        return []
    settings = document["settings"]
    load = document["load_average"]
    lines = [
        "## Ray Data batch jobs",
        "",
        f"`EmbedBatches` and `GenerateBatches` ({where(document)}; Ray {settings['ray']}): "
        f"{settings['texts']} short texts embedded and {settings['prompts']} prompts answered "
        f"({settings['max_tokens']} tokens at most, greedy), {settings['batch_size']} rows a "
        f"batch. In-process is the class called in one process on one engine with "
        f"{settings['threads']} threads; Ray runs `map_batches` on a local cluster with one "
        "and two actors of one CPU (one thread) each. A Ray run's wall time includes starting "
        "its actors and loading the weights; the steady rate takes one actor's start (timed "
        f"alone on one row) out. Ray's own start took {document['ray_init_s']:.1f} s. The "
        f"machine's one-minute load average was {load['start']:.1f} at the start and "
        f"{load['end']:.1f} at the end, on {settings['threads']} cores: other work shared "
        "them, and moves these figures.",
        "",
        "| job | side | rows/s (wall) | vs in-process | steady rows/s | per actor, steady |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for job in ("embeddings", "generation"):
        sides = document[job]
        local = sides["in_process"]
        start_s = sides["actor_start_s"]
        lines.append(
            f"| {job} | in-process ({settings['threads']} threads) "
            f"| {local['rows_per_s']:.1f} | 1.00x | {local['rows_per_s']:.1f} | |"
        )
        for actors in (1, 2):
            side = sides[f"ray_{actors}"]
            steady = steady_rate(side, start_s)
            lines.append(
                f"| {job} | Ray, {actors} actor{'s' if actors > 1 else ''} "
                f"| {side['rows_per_s']:.1f} | {side['rows_per_s'] / local['rows_per_s']:.2f}x "
                f"| {steady:.1f} | {steady / actors:.1f} |"
            )
        two = sides["ray_2"]
        headline.append(
            f"| Ray Data {job}, 2 actors (wall, with their start) vs in-process, same machine "
            f"| {two['rows_per_s'] / local['rows_per_s']:.2f}x |"
        )
    if max(load["start"], load["end"]) > settings["threads"]:
        lines += [
            "",
            "The machine was busy while this ran (a load average above its cores): a llama.cpp "
            "thread team of two then waits at every step for whichever of its threads is "
            "descheduled, which an engine of one thread never does, so the in-process side "
            "lost far more than the actors did. On an idle machine expect one process with "
            "every core and one one-CPU actor per core to come out about level, not these "
            "ratios; rerun `make bench-ray` on a quiet machine to measure it.",
        ]
    lines += ["", *_on_paper(document), ""]
    return lines


def _on_paper(document: dict[str, Any]) -> list[str]:
    """Scaling to N machines, from the per-actor steady rates (worked out, not measured)."""
    cores = int(document["settings"]["threads"])
    lines = [
        "**Scaling to N machines, on paper.** Nothing here ran on more than one machine. Ray "
        "Data gives each actor its own rows and the actors share nothing but the driver, so a "
        f"cluster of N machines like this one, each running {cores} one-CPU actors, would go "
        "about N times the two-actor steady rate measured here, as long as reading the input "
        "and writing the output keep up:",
        "",
        "| job | per actor | one machine | " + " | ".join(f"{n} machines" for n in MACHINES) + " |",
        "|---|---:|---:|" + "---:|" * len(MACHINES),
    ]
    for job in ("embeddings", "generation"):
        sides = document[job]
        per_actor = steady_rate(sides["ray_2"], sides["actor_start_s"]) / 2
        machine = per_actor * cores
        cells = " | ".join(f"{machine * n:.0f} rows/s" for n in MACHINES)
        lines.append(f"| {job} | {per_actor:.1f} rows/s | {machine:.1f} rows/s | {cells} |")
    embeddings = document["embeddings"]
    per_actor = steady_rate(embeddings["ray_2"], embeddings["actor_start_s"]) / 2
    biggest = MACHINES[-1]
    hours = CORPUS / (per_actor * cores * biggest) / 3600
    lines += [
        "",
        f"At that rate, {CORPUS:,} texts like these would take about {hours:.1f} hours on "
        f"{biggest} such machines (each actor also spends "
        f"{embeddings['actor_start_s']:.1f} s starting, once). Measured here, two actors on "
        f"{cores} cores went {_efficiency(embeddings):.2f} times the rate of one actor alone, "
        "twice, for embeddings: the two shared this machine's cores and memory with each other "
        "(and with whatever else ran), which actors on separate machines do not.",
    ]
    return lines


def _efficiency(sides: dict[str, Any]) -> float:
    start_s = sides["actor_start_s"]
    return steady_rate(sides["ray_2"], start_s) / (2 * steady_rate(sides["ray_1"], start_s))
