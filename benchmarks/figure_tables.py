"""Tables of the docs built wholly from one results file, for ``<!--table NAME-->`` blocks.

Each public function takes the results (``results[stem]`` is ``benchmarks/results/STEM.json``
read) and returns the block's markdown; ``figures.py --check`` fails when a page's block
differs from what its function renders now, and ``--write`` (``make figures``) replaces it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

# The engine's own cost per step (docs/performance.md), kept in a module of their own.
from engine_tables import engine_overhead, step_profile_phases  # noqa: F401

Results = Mapping[str, Any]


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "n/a"


def _load(row: Mapping[str, Any]) -> str:
    if row["mode"] == "closed":
        return f"{row['load']} client{'s' if row['load'] != 1 else ''}"
    return f"{row['load']:g} req/s Poisson"


def serve_latency(results: Results) -> str:
    """docs/guides/server.md: ours / llama-server at each load of serve.json (below 1: ours is
    faster or its latency lower), with the requests each side answered 429."""
    document = results["serve"]
    peers = {
        (row["mode"], row["load"]): row
        for row in document["levels"]
        if row["server"] == "llama-server"
    }
    lines = [
        "| load | tok/s | TTFT P50 / P99 | inter-token P50 / P99 "
        "| answered 429 (ours / llama-server) |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in document["levels"]:
        peer = peers.get((row["mode"], row["load"]))
        if row["server"] != "ours" or peer is None:
            continue
        ttft, itl = row["ttft_ms"], row["itl_ms"]
        lines.append(
            f"| {_load(row)} | {_ratio(row['tok_s'], peer['tok_s'])} "
            f"| {_ratio(ttft['p50'], peer['ttft_ms']['p50'])} / "
            f"{_ratio(ttft['p99'], peer['ttft_ms']['p99'])} "
            f"| {_ratio(itl['p50'], peer['itl_ms']['p50'])} / "
            f"{_ratio(itl['p99'], peer['itl_ms']['p99'])} "
            f"| {row['rejected_429']} of {row['requests']} / "
            f"{peer['rejected_429']} of {peer['requests']} |"
        )
    return "\n".join(lines)


def serve_light_ttft(results: Results) -> str:
    """docs/performance.md: one client's time to first token through ``serve``, through
    ``serve --prefill-block 0`` (the layout off) and through llama-server (serve_light.json),
    with each of ours / llama-server."""
    rows = {row["server"]: row for row in results["serve_light"]["levels"]}
    ours, loose, peer = rows["ours"], rows["ours (layout off)"], rows["llama-server"]
    lines = [
        "| TTFT | ours | ours (layout off) | llama-server | ours / llama-server "
        "| layout off / llama-server |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key in ("p50", "p90", "p99"):
        a, c, b = ours["ttft_ms"][key], loose["ttft_ms"][key], peer["ttft_ms"][key]
        lines.append(
            f"| {key.upper()} | {a:.0f} ms | {c:.0f} ms | {b:.0f} ms | {_ratio(a, b)} "
            f"| {_ratio(c, b)} |"
        )
    return "\n".join(lines)


def single_stream_rates(results: Results) -> str:
    """docs/performance.md: one stream's decode rate (greedy and sampled) on each side of
    single_stream.json, against llama-bench's tg128 and llama-server, and the prompt read
    against pp512 (medians over the rounds)."""
    lines = [
        "| model | side | greedy tok/s | / tg128 | / llama-server | sampled tok/s | / tg128 "
        "| / llama-server |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    reads = ["", "| model | ours tok/s | ours (layout off) | llama-server tok/s | pp512 tok/s "
             "| ours / pp512 | layout off / pp512 |",
             "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for model in results["single_stream"]["models"]:
        rate, name = model["tok_s"], _model_name(model["model"])
        tg = rate.get("tg128")
        for side, label in (
            ("engine", "ours, `Engine.stream`"),
            ("langchain", "ours, `ChatLlamaCpp.stream`"),
            ("server", "llama-server"),
        ):
            cells = []
            for mode in ("greedy", "sampled"):
                value, server = rate[f"{side} {mode}"], rate[f"server {mode}"]
                ceiling = _ratio(value, tg) if tg else "n/a"
                cells.append(f"{value:.1f} | {ceiling} | {_ratio(value, server)}")
            lines.append(f"| {name} | {label} | {' | '.join(cells)} |")
        if tg:
            lines.append(f"| {name} | llama-bench tg128 | {tg:.1f} | | | {tg:.1f} | | |")
        pp, read, loose = (
            rate.get("pp512"),
            rate["engine prompt"],
            rate.get("engine prompt, layout off"),
        )
        off = f"{loose:.0f}" if loose else "n/a"
        ceiling = (
            f"{pp:.0f} | {_ratio(read, pp)} | {_ratio(loose, pp) if loose else 'n/a'}"
            if pp
            else "n/a | n/a | n/a"
        )
        reads.append(f"| {name} | {read:.0f} | {off} | {rate['server prompt']:.0f} | {ceiling} |")
    return "\n".join(lines + reads)


def _paired(runs: Mapping[str, list[float]], side: str, peer: str) -> str:
    """The median of each round's ``side`` / ``peer`` (a slow round slows both of its sides)."""
    if peer not in runs or side not in runs:
        return "n/a"
    ratios = [a / b for a, b in zip(runs[side], runs[peer], strict=True) if b]
    return f"{statistics.median(ratios):.2f}x" if ratios else "n/a"


def single_stream_paired(results: Results) -> str:
    """docs/performance.md: single_stream.json's ratios round by round (the median of each
    round's ratio, where the first table divides the medians of each side)."""
    lines = [
        "| model | side | greedy / tg128 | greedy / llama-server | sampled / tg128 "
        "| sampled / llama-server | prompt read / pp512 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for model in results["single_stream"]["models"]:
        runs, name = model["runs"], _model_name(model["model"])
        for side, label in (("engine", "`Engine.stream`"), ("langchain", "`ChatLlamaCpp.stream`")):
            cells = [
                f"{_paired(runs, f'{side} {mode}', 'tg128')} "
                f"| {_paired(runs, f'{side} {mode}', f'server {mode}')}"
                for mode in ("greedy", "sampled")
            ]
            read = _paired(runs, "engine prompt", "pp512") if side == "engine" else ""
            lines.append(f"| {name} | {label} | {' | '.join(cells)} | {read} |")
    return "\n".join(lines)


def flash_attention_cpu(results: Results) -> str:
    """docs/performance.md: flash_attention_cpu.json, llama-bench with flash attention off and
    on, by depth (the median of each round's on / off)."""
    data = results["flash_attention_cpu"]
    depths = data["settings"]["depths"]
    header = " | ".join(f"after {d:,} tokens" for d in depths)
    lines = [f"| model | test | {header} |", "|---|---|" + "---:|" * len(depths)]
    for model in data["models"]:
        name, ratios = _model_name(model["model"]), model["on_over_off"]
        for test, label in (("tg64", "decode, 1 stream"), ("pp512", "a 512-token prompt")):
            cells = " | ".join(f"{ratios[f'{test} @ d{d}']:.2f}x" for d in depths)
            lines.append(f"| {name} | {label} | {cells} |")
    return "\n".join(lines)


# --- the guides' tables (docs/guides/embeddings.md, speculative.md) --------------------------


def _model_name(spec: str) -> str:
    """A model file as the guides name it: ``SmolLM2-135M-Instruct Q4_1``."""
    if spec.endswith(".gguf"):
        stem, _, quant = spec[: -len(".gguf")].rpartition(".")
        return f"{stem} {quant}" if stem else quant
    return spec


def embedding_corpus_rates(results: Results) -> str:
    """docs/guides/embeddings.md: the corpus indexed by ``Engine.embed`` and by llama-server
    (turns without a chat), against llama-bench's prompt processing, with how the single turns
    (all of them) compared."""
    lines = [
        "| model | tokens | ours texts/s | ours tokens/s | llama-server tokens/s "
        "| ceiling tokens/s | ours / llama-server | ours / ceiling "
        "| turns ours was faster | one turn, ours / llama-server |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for stem in ("embedding_corpus", "embedding_corpus_encoder"):
        document = results[stem]
        ours, server = (
            document["ours"]["seconds_per_chunk"],
            document["server"]["seconds_per_chunk"],
        )
        turns = [theirs / mine for mine, theirs in zip(ours, server, strict=True)]
        ceiling = str(document["ceiling"]).removeprefix("llama-bench ").split(",")[0]
        lines.append(
            f"| {_model_name(document['settings']['model'])} "
            f"| {document['settings']['tokens']:,} "
            f"| {document['ours_texts_per_s']:,.{2 if document['ours_texts_per_s'] < 10 else 0}f} "
            f"| {document['ours_tps']:,.0f} | {document['server_tps']:,.0f} "
            f"| {document['ceiling_tps']:,.0f} ({ceiling}) "
            f"| {_ratio(document['ours_tps'], document['server_tps'])} "
            f"| {_ratio(document['ours_tps'], document['ceiling_tps'])} "
            f"| {sum(turn > 1 for turn in turns)} of {len(turns)} "
            f"| {min(turns):.2f}x to {max(turns):.2f}x |"
        )
    return "\n".join(lines)


def embedding_chats_alongside(results: Results) -> str:
    """docs/guides/embeddings.md: a chat's speed while the corpus is indexed and alone."""
    document = results["embedding_corpus"]
    lines = [
        "| chat while embedding / alone | tokens/s, median | ratio (worst) |",
        "|---|---:|---:|",
    ]
    for label, key in (
        ("decode rate (tokens after the first, first to last)", "decode_tps"),
        ("whole request (from the call, waiting included)", "tps"),
    ):
        during, alone = document[f"chat_during_{key}"], document[f"chat_alone_{key}"]
        worst = document[f"chat_during_{key}_worst"]
        lines.append(
            f"| {label} | {during:.1f} / {alone:.1f} "
            f"| {_ratio(during, alone)} ({_ratio(worst, alone)}) |"
        )
    return "\n".join(lines)


def embedding_ctx_cost_idle(results: Results) -> str:
    """docs/guides/embeddings.md: one short text's embed at each ``embedding_n_ctx``, idle."""
    lines = [
        "| `embedding_n_ctx` | `Engine.embed`, first call (makes the context) "
        "| `Engine.embed`, later calls | decode, cells cleared (what the engine does) "
        "| decode, data cleared | of which the clear |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["embedding_ctx_cost"]["rows"]:
        lines.append(
            f"| {row['n_ctx']} | {row['engine_first_ms']:.0f} ms | {row['engine_ms']:.1f} ms "
            f"| {row['cells_embed_ms']:.1f} ms | {row['data_embed_ms']:.1f} ms "
            f"| {row['data_clear_ms']:.1f} ms |"
        )
    return "\n".join(lines)


def embedding_ctx_cost_busy(results: Results) -> str:
    """docs/guides/embeddings.md: the same with one core busy, this code and ``6bc73e9``'s."""
    lines = [
        "| code | round | `embedding_n_ctx` | `Engine.embed`, later calls "
        "| bare decode, cells cleared | bare decode, data cleared | 64 short texts |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for stem, code in (
        ("embedding_ctx_cost_busy", "current"),
        ("embedding_ctx_cost_busy_6bc73e9", "`6bc73e9`"),
    ):
        for row in results[stem]["rows"]:
            lines.append(
                f"| {code} | {row['round']} | {row['n_ctx']} | {row['engine_ms']:.1f} ms "
                f"| {row['cells_embed_ms']:.1f} ms | {row['data_embed_ms']:.1f} ms "
                f"| {row['short_texts_per_s']:.1f} texts/s |"
            )
    return "\n".join(lines)


_SPECULATIVE_WORKLOADS = (
    ("quote", "(a) quote a 600-token document, 1 stream"),
    ("chat", "(b) free chat, 1 stream"),
    ("json", "(d) (a)'s JSON questions under a schema grammar, 1 stream"),
    ("mixed8", "(c) mixed, 8 concurrent"),
    ("mixed16", "(c) mixed, 16 concurrent"),
)


def speculative_workloads(results: Results) -> str:
    """docs/guides/speculative.md: ours with n-gram speculation and without, per workload."""
    ours = results["speculative"]["ours"]
    lines = [
        '| workload | `"ngram"` tok/s | off tok/s | ratio | drafts accepted (drafted) |',
        "|---|---:|---:|---:|---:|",
    ]
    for key, label in _SPECULATIVE_WORKLOADS:
        row = ours[key]
        if not row["drafted"]:
            drafts = "none drafted"
        elif key.startswith("mixed"):  # a handful: a share of them says nothing
            drafts = f"{row['drafted']} drafted"
        else:
            drafts = f"{row['acceptance'] * 100:.0f}% ({row['drafted']:,})"
        lines.append(
            f"| {label} | {row['ngram']:.1f} | {row['off']:.1f} "
            f"| {_ratio(row['ngram'], row['off'])} | {drafts} |"
        )
    return "\n".join(lines)


_SPECULATIVE_PEERS = {
    "ours, speculative=ngram": 'ours, `speculative="ngram"`',
    "ours, speculative=None": "ours, off",
    "llama-server": "`llama-server`",
    "llama-server ngram-simple": (
        "`llama-server --spec-type ngram-simple` (n 3, m 8, draft max 8)"
    ),
    "llama-cpp-python Llama": "llama-cpp-python `Llama`",
    "Llama + PromptLookup": "`Llama` + `LlamaPromptLookupDecoding(num_pred_tokens=8)`",
    "llama-bench tg128 (C++)": "`llama-bench` tg128 (C++, empty context)",
}


def speculative_peers(results: Results) -> str:
    """docs/guides/speculative.md: single-stream speed against the peers (ratio: ours with
    ``"ngram"`` over the peer)."""
    document = results["speculative"]
    ours = document["ours"]
    lines = [
        "| peer | (a) quote tok/s | ours / peer | (b) chat tok/s | ours / peer |",
        "|---|---:|---:|---:|---:|",
    ]
    for peer in document["peers"]:
        cells = [_SPECULATIVE_PEERS.get(peer["peer"], peer["peer"])]
        for workload in ("quote", "chat"):
            rate = peer[workload]
            if rate is not None:
                cells += [f"{rate:.1f}", _ratio(ours[workload]["ngram"], rate)]
            elif workload == "quote":  # it ran neither: it failed on the first
                cells += ["failed", ""]
            else:
                cells += ["", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def prompt_cache_ttft(results: Results) -> str:
    """docs/guides/speculative.md: time to first token cold, warm and after a restart."""
    lines = ["| case | time to first token | vs cold |", "|---|---:|---:|"]
    for row in results["prompt_cache"]["rows"]:
        lines.append(f"| {row['case']} | {row['ttft_ms']:,.0f} ms | {row['vs_cold']:.2f}x |")
    return "\n".join(lines)


def lora_mixes(results: Results) -> str:
    """docs/performance.md: streams with LoRA adapters chosen per request against none."""
    lines = ["| streams' adapters | tokens/s, all streams | vs no adapter |", "|---|---:|---:|"]
    for row in results["lora"]["rows"]:
        lines.append(f"| {row['mix']} | {row['tokens_per_s']:,.1f} | {row['vs_none']:.2f}x |")
    return "\n".join(lines)


def agent_suite(results: Results) -> str:
    """docs/guides/agents.md: the agent suite with the loop guard (agent_tasks.json) and the run
    before it (cited.json: that result wording is gone, so it cannot be measured again)."""
    before = results["cited"]["agents_before_guard"]["value"]
    after = results["agent_tasks"]["summaries"]
    lines = [
        "| | finished with an answer | right answer | mean steps | valid calls "
        "| repeated calls | repeats prevented |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, name in (
        ("langchain", "LangChain `create_agent`"),
        ("llama_index", "LlamaIndex `FunctionAgent`"),
    ):
        for label, row in (
            (f"{name}, before the guard", before[key]),
            (f"{name}, with it", after[key]),
        ):
            lines.append(
                f"| {label} | {row['finished']}/{row['tasks']} | {row['correct']}/{row['tasks']} "
                f"| {row['mean_steps']:.1f} | {row['valid_calls']}/{row['tool_calls']} "
                f"| {row['repeated_calls']} | {row['repeats_prevented']} |"
            )
    return "\n".join(lines)


MODEL_NAMES = {"smollm2-135m": "SmolLM2-135M", "gemma3-270m": "Gemma 3 270M"}


def kv_cache_types(results: Results) -> str:
    """docs/performance.md: each KV cache type's bytes per cell (from the GGUF header and as
    llama.cpp reported its cache) and its agreement with f16 (kv_cache_types.json)."""
    cache_names = {"f16+fa": "f16 + flash attention"}
    lines = [
        "| model | cache | bytes per cell (header) | reported by llama.cpp "
        "| top-1 agreement with f16 | first differing token, 5 prompts |",
        "|---|---|---|---|---|---|",
    ]
    for model in results["kv_cache_types"]["models"]:
        header = model["header"]
        heads = f"{header['kv_heads']} KV head{'s' if header['kv_heads'] != 1 else ''}"
        name = (
            f"{MODEL_NAMES.get(model['model'], model['model'])} ({header['layers']} layers, "
            f"{heads} of {header['key_length']})"
        )
        for index, (cache, row) in enumerate(model["types"].items()):
            base = cache.split("+")[0]
            reported = sum(c["bytes_per_cell"] for c in row["reported_caches"])
            agreement = f"{row['teacher_forced_top1_agreement']:.3f}"
            firsts = ", ".join(
                "-" if f is None else str(f) for f in row["teacher_forced_first_difference"]
            )
            lines.append(
                f"| {name if index == 0 else ''} | {cache_names.get(cache, cache)} "
                f"| {header['bytes_per_cell'][base]:,.0f} | {reported:,.0f} "
                f"| {agreement}{' (baseline)' if cache == 'f16' else ''} | {firsts} |"
            )
    return "\n".join(lines)


def shared_prefix_walls(results: Results) -> str:
    """docs/performance.md: requests that begin alike, each side's wall and first-token times,
    and each side's memory with no settings (shared_prefix.json)."""
    document = results["shared_prefix"]
    sides = ["ours", "ours, unified", "ours, sharing off", "llama-server"]
    figures = document["figures"]
    n = document["settings"]["n"]
    rows = [
        (f"{n} chats over one ~1,900-token system prompt, at once, cold: wall", "cold", "wall_s"),
        ("the same, mean time to first token", "cold", "mean_ttft_s"),
        ("the same again (warm): wall", "warm", "wall_s"),
        (
            "32 documents under one ~900-token instruction, at once (a map step): wall",
            "map",
            "wall_s",
        ),
        (
            "8 agents at once, 3 turns each, under a ~1,700-token tool listing: wall",
            "agents",
            "wall_s",
        ),
        (f"{n} unrelated short chats at once: wall", "unrelated", "wall_s"),
    ]
    lines = [
        "| | ours | ours, unified cache | ours, sharing off | llama-server |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, case, key in rows:
        cells = " | ".join(f"{figures[side][case][key]:.1f} s" for side in sides)
        lines.append(f"| {label} | {cells} |")
    memory = document["default_memory_mib"]
    cells = " | ".join(f"{memory[side]:.0f} MiB" if side in memory else "" for side in sides)
    lines.append(f"| memory after one short answer, no settings | {cells} |")
    return "\n".join(lines)


def second_wave_walls(results: Results) -> str:
    """docs/performance.md: chats over one system prompt, then new chats over it right after,
    each side's wall and first-token times and ours over llama-server (second_wave.json)."""
    document = results["second_wave"]
    figures = document["figures"]
    sides = [s for s in ("ours", "ours, no idle realign", "llama-server") if s in figures]
    n = document["settings"]["n"]
    rows = [
        (f"{n} chats over one ~1,600-token system prompt, at once (cold): wall", "cold", "wall_s"),
        ("the same, mean time to first token", "cold", "mean_ttft_s"),
        (f"then {n} new questions under it, at once (warm): wall", "warm", "wall_s"),
        ("the same, mean time to first token", "warm", "mean_ttft_s"),
    ]
    header = " | ".join(sides)
    ratios = document.get("ratios", {})
    lines = [f"| | {header} | ours / llama-server |", "|---|" + "---:|" * (len(sides) + 1)]
    for label, case, key in rows:
        cells = " | ".join(f"{figures[side][case][key]:.1f} s" for side in sides)
        ratio = ratios.get("ours", {}).get(f"{case} {key}")
        lines.append(f"| {label} | {cells} | {'' if ratio is None else f'{ratio:.2f}x'} |")
    cached = figures["ours"]["warm"].get("cached_prompt_tokens")
    if cached is not None:
        kept = f"| prompt tokens the warm wave kept from the cache (ours) | {cached:,} |"
        lines.append(kept + " |" * len(sides))
    return "\n".join(lines)


def reproducibility_layout(results: Results) -> str:
    """docs/reproducibility.md: what the prefill layout costs, each block size against the
    layout off (reproducibility.json, the latest run of make bench-repro)."""
    layout = results["reproducibility"]["layout"]
    sides = [("block 64", "64 (default)"), ("block 32", "32"), ("block 128", "128"), ("off", "off")]
    off = layout["off"]

    def cell(row: Mapping[str, Any], key: str) -> str:
        return f"{row[f'{key}_evaluated']} ({row[f'{key}_ttft_s']:.2f} s)"

    rows: list[tuple[str, Callable[[Mapping[str, Any]], str]]] = [
        (
            "a long prompt read cold, tokens/s (against off)",
            lambda r: (
                f"{r['long_prompt_tokens_per_s']:.0f} "
                f"({r['long_prompt_tokens_per_s'] / off['long_prompt_tokens_per_s']:.2f}x)"
            ),
        ),
        (
            "a short chat read cold, time to first token",
            lambda r: f"{r['short_cold_ttft_s'] * 1000:.0f} ms",
        ),
        (
            "the same short chat again (cached), time to first token",
            lambda r: f"{r['short_cached_ttft_s'] * 1000:.0f} ms",
        ),
        (
            "a follow-up sent at once, prompt tokens read (time to first token)",
            lambda r: cell(r, "follow_up"),
        ),
        (
            "a follow-up after a pause, prompt tokens read (time to first token)",
            lambda r: cell(r, "follow_up_after_idle"),
        ),
    ]
    lines = [
        "| prefill block | " + " | ".join(label for _, label in sides) + " |",
        "|---|" + "---:|" * len(sides),
    ]
    for label, render in rows:
        lines.append(f"| {label} | " + " | ".join(render(layout[key]) for key, _ in sides) + " |")
    return "\n".join(lines)


def reproducibility_deterministic(results: Results) -> str:
    """docs/reproducibility.md: deterministic=True against the default, tokens/s at each
    concurrency (reproducibility.json)."""
    runs = results["reproducibility"]["deterministic"]
    levels = list(runs)
    default = [runs[level]["default"]["tokens_per_s"] for level in levels]
    alone = [runs[level]["deterministic"]["tokens_per_s"] for level in levels]
    lines = [
        "| concurrent requests | " + " | ".join(levels) + " |",
        "|---|" + "---:|" * len(levels),
        "| default, tokens/s | " + " | ".join(f"{v:.0f}" for v in default) + " |",
        "| deterministic, tokens/s | " + " | ".join(f"{v:.0f}" for v in alone) + " |",
        "| deterministic / default | "
        + " | ".join(f"{a / d:.2f}x" for a, d in zip(alone, default, strict=True))
        + " |",
    ]
    return "\n".join(lines)


def soak_summary(results: Results) -> str:
    """docs/reliability.md: the soak's accounting (soak.json): requests by how they ended, and
    what a leak would move (memory, threads, descriptors, KV cells)."""
    document = results["soak"]
    ended: dict[str, int] = {}
    kinds = set()
    for key, count in document["outcomes"].items():
        kind, outcome = key.split("/", 1)
        kinds.add(kind)
        ended[outcome] = ended.get(outcome, 0) + count
    names = {
        "abandoned": "abandoned",
        "task-cancelled": "task-cancelled",
        "cancelled": "cancelled mid-prompt or mid-stream",
        "timeout": "timed out",
        "overloaded": "overloaded",
    }
    typed = [(names[o], ended[o]) for o in names if ended.get(o)]
    rss, samples = document["rss_mb"], document["samples"]
    peak = document["rss_peak_mb"]
    last_peak = max(i for i, s in enumerate(samples) if s["rss_mb"] == peak)
    after = [s["rss_mb"] for s in samples[last_peak + 1 :]]
    minutes = (samples[-1]["t"] - samples[last_peak]["t"]) / 60
    threads, fds = document["threads"], document["fds"]
    lines = [
        "| Figure | Value |",
        "|---|---|",
        f"| Requests | {document['requests']} of {len(kinds)} kinds; "
        f"{sum(n for _, n in typed)} of them ended "
        + ", ".join(f"{name} ({n})" for name, n in typed)
        + ", each with its typed error |",
        f"| Untyped errors, requests never ended or ended twice | {len(document['untyped'])}, "
        f"{len(document['never_ended'])}, {len(document['double_ends'])} |",
        f"| RSS: start, after warm-up, end (peak) | {rss['start']:.1f} MB, "
        f"{rss['after_warmup']:.1f} MB, {rss['end']:.1f} MB ({peak:.1f} MB); after the peak, "
        f"{min(after):.1f} to {max(after):.1f} MB over the last {minutes:.0f} minutes |",
        f"| Threads: before the load, peak, end | {threads['before']}, {threads['peak']}, "
        f"{threads['end']} |",
        f"| File descriptors: before the load, peak, end | {fds['before']}, {fds['peak']}, "
        f"{fds['end']} |",
        f"| KV cells: peak, at the end (after `clear_cache`) | {document['kv_cells_peak']}, "
        f"{document['kv_cells_end']} |",
        f"| Queue depth peak | {document['queue_depth_peak']} (the limit: "
        f"{document['settings']['max_queued']}) |",
        "| Fixed greedy prompts, start vs end | "
        + ("identical" if document["checks"]["fixed greedy prompts unchanged"] else "changed")
        + " |",
    ]
    return "\n".join(lines)


# --- generated from the code, not from results (docs/guides/server.md) -----------------------


def engine_flags(results: Results) -> str:
    """docs/guides/server.md: every engine flag of ``serve``, ``chat`` and ``doctor``, with
    llama-server's flag and the ``EngineConfig`` field it sets. Rendered from the flag table
    (``llamacpp_integrations.engine_flags``) and ``EngineConfig``'s field docs, not from a
    results file, so that the page cannot drift from the code."""
    from llamacpp_integrations.engine_flags import flags_table

    return flags_table()
