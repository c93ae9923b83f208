"""Render the benchmark results committed under ``benchmarks/results/`` into the docs page
``docs/benchmarks.md`` with PNG plots in ``docs/assets/benchmarks/``.

Runs no benchmark: ``make bench-report`` runs them first. Each figure says where it was
measured; the headline is the ratio of the two sides measured in the same run, since absolute
times move with the machine.

    python benchmarks/report.py
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import results
from report_ray import ray_section

from llamacpp_integrations.models import KNOWN_MODELS

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "benchmarks.md"
ASSETS = ROOT / "docs" / "assets" / "benchmarks"
# False while figures.py compares the page's text with what it renders: no PNG is drawn then.
DRAW = {"plots": True}


def _pyplot() -> Any:
    """matplotlib, imported only when a plot is drawn (the text needs none)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def load() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(results.RESULTS_DIR.glob("*.json")):
        document = json.loads(path.read_text())
        found[document["benchmark"]] = document
    return found


def _model_file(spec: str) -> str:
    """A model spec as its file name: a known short name as the file it fetches, the same on
    every machine (the page's text must not depend on where the models are)."""
    known = KNOWN_MODELS.get(spec)
    return known.filename if known is not None else Path(spec).name


def where(document: dict[str, Any]) -> str:
    machine, settings = document["machine"], document["settings"]
    model = _model_file(str(settings.get("model", "?")))
    threads = settings.get("threads", machine["cores"])
    commit = str(machine.get("commit", "?"))
    return (
        f"{machine['cpu']}, {machine['cores']} cores, {threads} threads; model {model}; "
        f"llama-cpp-python {machine.get('llama_cpp_python', '?')}; measured {machine['date']} "
        f"on commit {commit[:7]}{'+dirty' if commit.endswith('+dirty') else ''}"
    )


def _plot(
    name: str,
    title: str,
    xlabel: str,
    ylabel: str,
    series: dict[str, tuple[list[Any], list[float]]],
    caption: str,
) -> str:
    if not DRAW["plots"]:
        return f"assets/benchmarks/{name}.png"
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6.4, 3.9), dpi=110)
    for label, (xs, ys) in series.items():
        axes.plot(xs, ys, marker="o", label=label)
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(alpha=0.3)
    axes.legend()
    _caption(figure, caption)
    ASSETS.mkdir(parents=True, exist_ok=True)
    figure.savefig(ASSETS / f"{name}.png")
    plt.close(figure)
    return f"assets/benchmarks/{name}.png"


def _caption(figure: Any, caption: str) -> None:
    """Where it was measured, under the plot: a figure can travel without its page."""
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    figure.text(0.01, 0.01, textwrap.fill(caption, 110), fontsize=6, color="#555555")


def _bars(name: str, title: str, ylabel: str, bars: dict[str, float], caption: str) -> str:
    if not DRAW["plots"]:
        return f"assets/benchmarks/{name}.png"
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6.4, 3.5), dpi=110)
    axes.bar(list(bars), list(bars.values()), color=["#3b7dd8", "#9a9a9a", "#c9a227"][: len(bars)])
    axes.set_title(title)
    axes.set_ylabel(ylabel)
    axes.grid(axis="y", alpha=0.3)
    _caption(figure, caption)
    ASSETS.mkdir(parents=True, exist_ok=True)
    figure.savefig(ASSETS / f"{name}.png")
    plt.close(figure)
    return f"assets/benchmarks/{name}.png"


def throughput_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    lines: list[str] = []
    llama = found.get("throughput")
    server = found.get("llama_server")
    if llama is None and server is None:
        return lines
    lines += ["## Generation throughput", ""]
    series: dict[str, tuple[list[Any], list[float]]] = {}
    ttft: dict[str, tuple[list[Any], list[float]]] = {}
    if server is not None:
        levels = server["levels"]
        xs = [row["concurrent"] for row in levels]
        series["ours (vs llama-server run)"] = (xs, [_tok_s(r["ours"]) for r in levels])
        series["llama.cpp llama-server"] = (xs, [_tok_s(r["server"]) for r in levels])
        ttft["ours (vs llama-server run)"] = (xs, [r["ours"]["mean_ttft_s"] * 1000 for r in levels])
        ttft["llama.cpp llama-server"] = (xs, [r["server"]["mean_ttft_s"] * 1000 for r in levels])
        ratios = " / ".join(f"{_tok_s(r['ours']) / _tok_s(r['server']):.2f}x" for r in levels)
        headline.append(
            f"| generated tokens/s vs llama.cpp `llama-server` at {'/'.join(map(str, xs))} "
            f"concurrent | {ratios} |"
        )
    if llama is not None:
        levels = llama["levels"]
        xs = [row["concurrent"] for row in levels]
        series["ours (vs Llama run)"] = (xs, [_tok_s(r["ours"]) for r in levels])
        series["llama-cpp-python Llama"] = (xs, [_tok_s(r["peer"]) for r in levels])
        ttft["ours (vs Llama run)"] = (xs, [r["ours"]["mean_ttft_s"] * 1000 for r in levels])
        ttft["llama-cpp-python Llama"] = (xs, [r["peer"]["mean_ttft_s"] * 1000 for r in levels])
        ratios = " / ".join(f"{_tok_s(r['ours']) / _tok_s(r['peer']):.2f}x" for r in levels)
        headline.append(
            f"| generated tokens/s vs llama-cpp-python `Llama` at {'/'.join(map(str, xs))} "
            f"concurrent | {ratios} |"
        )
    measured = [d for d in (server, llama) if d is not None]
    caption = "; ".join(dict.fromkeys(where(d) for d in measured)) + (
        f"; {measured[0]['settings']['max_tokens']} tokens per request, greedy"
    )
    plot = _plot(
        "throughput",
        "Aggregate generated tokens/s",
        "concurrent requests",
        "tokens/s",
        series,
        caption,
    )
    plot_ttft = _plot(
        "ttft",
        "Mean time to first token",
        "concurrent requests",
        "ms (from batch start)",
        ttft,
        caption,
    )
    lines += [f"![tokens per second against concurrency]({plot})", ""]
    lines += [f"![time to first token against concurrency]({plot_ttft})", ""]
    for document, peer_key, peer_name in (
        (server, "server", "llama-server"),
        (llama, "peer", "Llama"),
    ):
        if document is None:
            continue
        lines += [
            f"**Ours against {peer_name}**, one run ({where(document)}; "
            f"{document['settings']['max_tokens']} tokens per request, greedy, "
            f"median of {document['settings']['repeat']}):",
            "",
            f"| concurrent | ours tok/s | {peer_name} tok/s | ratio | ours mean TTFT "
            f"| {peer_name} mean TTFT |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for row in document["levels"]:
            mine, theirs = row["ours"], row[peer_key]
            lines.append(
                f"| {row['concurrent']} | {_tok_s(mine):.1f} | {_tok_s(theirs):.1f} "
                f"| {_tok_s(mine) / _tok_s(theirs):.2f}x | {mine['mean_ttft_s'] * 1000:.0f} ms "
                f"| {theirs['mean_ttft_s'] * 1000:.0f} ms |"
            )
        lines.append("")
    if llama is not None:
        single = llama["single_stream"]
        ours_rate = _decode_rate(single["ours"])
        peer_rate = _decode_rate(single["peer"])
        lines += [
            f"Single stream of {llama['settings']['single_tokens']} tokens: ours "
            f"{ours_rate:.1f} tok/s, `Llama` {peer_rate:.1f} tok/s "
            f"({ours_rate / peer_rate:.2f}x).",
            "",
        ]
        headline.append(f"| single stream decode vs `Llama` | {ours_rate / peer_rate:.2f}x |")
    return lines


def _tok_s(run: dict[str, float]) -> float:
    return run["tokens"] / run["wall_s"]


def _decode_rate(run: dict[str, float]) -> float:
    return (run["tokens"] - 1) / run["decode_s"] if run["decode_s"] > 0 else float("nan")


def embeddings_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    document = found.get("embeddings")
    if document is None:
        return []
    mine, theirs = document["ours"], document["peer"]
    n = document["settings"]["texts"]
    lines = ["## Embeddings", ""]
    if "error" in theirs:
        lines += [f"langchain-community's `LlamaCppEmbeddings` failed: {theirs['error']}", ""]
        return lines
    plot = _bars(
        "embeddings",
        f"embed_documents of {n} short texts",
        "texts/s",
        {"ours": mine["texts_per_s"], "langchain-community": theirs["texts_per_s"]},
        where(document),
    )
    lines += [
        f"![embedding throughput]({plot})",
        "",
        f"{n} short texts through `embed_documents` ({where(document)}; median of "
        f"{document['settings']['repeat']}):",
        "",
        "| | texts/s | vectors returned for the texts |",
        "|---|---:|---:|",
        f"| ours | {mine['texts_per_s']:.1f} | {mine['vectors']:.0f} |",
        f"| langchain-community `LlamaCppEmbeddings` | {theirs['texts_per_s']:.1f} "
        f"| {theirs['vectors']:.0f} |",
        "",
        "langchain-community gets one vector per token from a model without pooling and returns "
        "them all, so its list is not one vector per text.",
        "",
    ]
    headline.append(
        f"| embeddings texts/s vs langchain-community | "
        f"{mine['texts_per_s'] / theirs['texts_per_s']:.2f}x |"
    )
    return lines


def embedding_corpus_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    runs = [found[k] for k in ("embedding_corpus", "embedding_corpus_encoder") if k in found]
    if not runs:
        return []
    lines = [
        "## Indexing a corpus",
        "",
        "Mixed-length texts embedded by `Engine.embed` against `llama-server --embeddings` (4 "
        "slots, requests of 32 texts from 4 client threads), both loaded and taking turns chunk "
        "by chunk, and against llama.cpp's prompt-processing ceiling; `make bench-embeddings`. "
        "Rates are over the chunks without a chat; every fourth of our chunks carries one.",
        "",
        "| model | texts | tokens | ours texts/s | ours tokens/s | llama-server tokens/s "
        "| ceiling tokens/s | ours / llama-server | ours / ceiling | short texts, ours / "
        "llama-server |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for document in runs:
        settings = document["settings"]
        ceiling = document.get("ceiling_tps")
        ours, server = document["ours_tps"], document["server_tps"]
        short = document.get("short_ours_texts_per_s"), document.get("short_server_texts_per_s")
        lines.append(
            f"| {_model_file(settings['model'])} | {settings['texts']} | {settings['tokens']} "
            f"| {document['ours_texts_per_s']:.1f} | {ours:.0f} | {server:.0f} "
            f"| {f'{ceiling:.0f}' if ceiling else 'n/a'} | {ours / server:.2f}x "
            f"| {f'{ours / ceiling:.2f}x' if ceiling else 'n/a'} "
            f"| {f'{short[0] / short[1]:.2f}x' if short[0] and short[1] else 'n/a'} |"
        )
    lines.append("")
    for document in runs:
        settings = document["settings"]
        lines.append(
            f"- {_model_file(settings['model'])}: {where(document)}; ceiling: "
            f"{document.get('ceiling', 'none')}; 1-minute load "
            f"{settings.get('load_1min_before', '?')} before, "
            f"{settings.get('load_1min_after', '?')} after."
        )
    main = found.get("embedding_corpus")
    if main is not None:
        headline.append(
            f"| corpus embedding tokens/s vs llama-server --embeddings | "
            f"{main['ours_tps'] / main['server_tps']:.2f}x |"
        )
    if main is not None and "chat_alone_tps" in main:
        lines += [
            "",
            "Chats alongside the corpus (median over the chat chunks, worst in brackets):",
            "",
        ]
        lines += ["| measure | alone tokens/s | while embedding | ratio |", "|---|---:|---:|---:|"]
        for label, key in (("decode rate", "decode_tps"), ("whole request", "tps")):
            alone, during = main[f"chat_alone_{key}"], main[f"chat_during_{key}"]
            worst = main.get(f"chat_during_{key}_worst", during)
            lines.append(
                f"| {label} | {alone:.1f} | {during:.1f} | {during / alone:.2f}x "
                f"({worst / alone:.2f}x) |"
            )
    return [*lines, ""]


def images_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    document = found.get("images")
    if document is None:
        return []
    settings = document["settings"]
    rounds = document["rounds"]
    lines = [
        "## Images",
        "",
        f"{settings['users']} users each send a different picture under a shared system "
        f"prompt, then ask a follow-up about it; {settings['max_tokens']} tokens per answer "
        f"({where(document)}; projector: {settings['projector']}; peer: {settings['peer']}, "
        f"median of {settings['repeat']}).",
        "",
        "| round | ours | peer | speed-up | prompt tokens evaluated (ours / peer) |",
        "|---|---:|---:|---:|---|",
    ]
    bars: dict[str, float] = {}
    for index, row in enumerate(rounds):
        mine, theirs = row["ours"], row["peer"]
        speedup = theirs["wall_s"] / mine["wall_s"]
        label = "first question" if index == 0 else "follow-up"
        lines.append(
            f"| {label} | {mine['wall_s']:.2f} s | {theirs['wall_s']:.2f} s | {speedup:.2f}x "
            f"| {mine['evaluated']} of {mine['prompt']} / {theirs['evaluated']} of "
            f"{theirs['prompt']} |"
        )
        bars[f"ours, {label}"] = mine["wall_s"]
        bars[f"peer, {label}"] = theirs["wall_s"]
        headline.append(f"| image chat, {label}, vs llama-cpp-python's handler | {speedup:.2f}x |")
    lines += ["", f"![image round trip]({_image_plot(rounds, where(document))})", ""]
    return lines


def _image_plot(rounds: list[dict[str, Any]], caption: str) -> str:
    labels = ["first question", "follow-up"][: len(rounds)]
    return _plot(
        "images",
        "Image chats: wall time per round",
        "round",
        "seconds",
        {
            "ours": (labels, [r["ours"]["wall_s"] for r in rounds]),
            "llama-cpp-python Llava15ChatHandler": (labels, [r["peer"]["wall_s"] for r in rounds]),
        },
        caption,
    )


LOOP_CALLS = {
    "ainvoke": "`ChatLlamaCpp.ainvoke`",
    "astream": "`ChatLlamaCpp.astream`",
    "llamaindex": "LlamaIndex `astream_chat`",
    "decode floor": "floor: a bare decode thread, no engine or framework",
    "long-slice decode floor": "floor: that thread with the engine's long time slice",
    "langchain floor": "floor: the decode thread under a stand-in LangChain chat model",
    "llamaindex floor": "floor: the decode thread under a stand-in LlamaIndex LLM",
}


def loop_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    document = found.get("loop_stall")
    if document is None:
        return []
    repeat = document["settings"]["repeat"]
    lines = [
        "## Event loop",
        "",
        "How late a 1 ms heartbeat on the asyncio event loop wakes while N concurrent calls "
        f"run ({where(document)}; {repeat} runs per level, every gap of every run pooled):",
        "",
        "| call | concurrent | longest gap, any run | P99 gap, all runs | median of the runs' "
        "longest | median of the runs' P99 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in document["levels"]:
        call = LOOP_CALLS[row.get("adapter", "ainvoke")]
        lines.append(
            f"| {call} | {row['concurrent']} | {row['longest_gap_ms']:.1f} ms "
            f"| {row['p99_all_gaps_ms']:.1f} ms | {row['max_gap_ms']:.1f} ms "
            f"| {row['p99_gap_ms']:.1f} ms |"
        )
        if "floor" not in row.get("adapter", ""):
            headline.append(
                f"| longest event-loop stall in {repeat} runs, {row['concurrent']} concurrent "
                f"{call} | {row['longest_gap_ms']:.1f} ms |"
            )
    floors = (
        "The floors (`benchmarks/loop_floor.py`) run without our engine in the same run: a "
        "thread decoding as many sequences with llama-cpp-python's low-level calls and the "
        "engine's thread count, and each framework's streaming call on a stand-in model that "
        "yields one chunk per step of that thread; last, the bare thread asking Linux for the "
        "engine's long time slice, as the engine's worker does."
    )
    return [*lines, "", floors, ""]


def remote_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    document = found.get("remote")
    if document is None:
        return []
    settings = document["settings"]
    threads = settings["threads_per_server"]
    placed = {**document, "settings": {**settings, "threads": threads}}
    machine = where(placed).replace(f"{threads} threads", f"{threads} thread per server")
    base = {r["concurrent"]: r for r in document["levels"] if r["peer"].startswith("ChatOpenAI")}
    lines = [
        "## Remote",
        "",
        "Our `ChatLlamaCpp` over llama-server's native API (`RemoteEngine`, and a `FleetEngine` "
        "of two servers) beside `langchain_openai.ChatOpenAI` on the same server's `/v1`, one "
        "thread per server, since two servers of two threads would oversubscribe two cores "
        f"({machine}; {settings['slots_per_server']} slots per server; "
        f"{settings['max_tokens']} tokens per request, greedy; the median of "
        f"{settings.get('repeat', 1)} rounds):",
        "",
        "| peer | concurrent | tok/s | ratio | mean TTFT | ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in document["levels"]:
        peer = base[row["concurrent"]]
        lines.append(
            f"| {row['peer']} | {row['concurrent']} | {row['tokens_per_s']:.1f} "
            f"| {row['tokens_per_s'] / peer['tokens_per_s']:.2f}x "
            f"| {row['mean_ttft_s'] * 1000:.0f} ms "
            f"| {row['mean_ttft_s'] / peer['mean_ttft_s']:.2f}x |"
        )
    lines += [
        "",
        "The two servers of the fleet have one core each and nothing to spare, so anything else "
        "running on the machine shows in the fleet's figures first; they move more from run to "
        "run than the single server's.",
    ]
    fleet = [r for r in document["levels"] if "fleet" in r["peer"]]
    headline.append(
        "| generated tokens/s, two-server fleet vs `ChatOpenAI` on one server, "
        + "/".join(str(r["concurrent"]) for r in fleet)
        + " concurrent | "
        + " / ".join(
            f"{r['tokens_per_s'] / base[r['concurrent']]['tokens_per_s']:.2f}x" for r in fleet
        )
        + " |"
    )
    lines += [
        "",
        f"Prompt-cache hit rate of the two-server fleet ({settings['prefixes']} system prompts "
        f"times {settings['per_prefix']} questions, shuffled, four at a time; cached prompt "
        "tokens over prompt tokens, as the servers count them):",
        "",
        "| routing | hit rate | requests per server |",
        "|---|---:|---|",
    ]
    for run in document["cache"]:
        name = "prefix affinity" if run["affinity"] else "least-loaded"
        per_server = ", ".join(str(s["requests"]) for s in run["servers"])
        lines.append(f"| {name} | {run['hit_rate']:.1%} | {per_server} |")
        headline.append(f"| fleet prompt-cache hit rate, {name} | {run['hit_rate']:.1%} |")
    return [*lines, ""]


def remote_embeddings_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    document = found.get("remote_embeddings")
    if document is None:
        return []
    settings = document["settings"]
    peers = document["peers"]
    base = peers[0]["median_texts_per_s"]
    lines = [
        "Embeddings through an `--embeddings` llama-server: `langchain_openai.OpenAIEmbeddings` "
        "on the server's `/v1/embeddings` (every text in one request), our `RemoteEngine` (one "
        "text a request, one request at a time), and our local `Engine.embed` on the same GGUF "
        f"for scale ({where(document)}; {settings['slots']} slots; {settings['texts']} texts of "
        f"about {settings['words']} words; the median of {settings['rounds']} rounds taken in "
        "turns). The last column compares each peer's vectors with each text embedded alone by "
        "the server: texts the tested build embeds side by side get vectors that are not theirs.",
        "",
        "| peer | texts/s | vs `OpenAIEmbeddings` | lowest cosine to the text alone |",
        "|---|---:|---:|---:|",
    ]
    for peer in peers:
        rate = peer["median_texts_per_s"]
        lines.append(
            f"| {peer['peer']} | {rate:.1f} | {rate / base:.2f}x "
            f"| {peer['lowest_cosine_to_alone']:.4f} |"
        )
    ours = peers[1]
    headline.append(
        "| remote embeddings texts/s, `RemoteEngine` vs `OpenAIEmbeddings` on llama-server "
        f"(lowest cosine to the text alone: {ours['lowest_cosine_to_alone']:.3f} vs "
        f"{peers[0]['lowest_cosine_to_alone']:.3f}) | {ours['median_texts_per_s'] / base:.2f}x |"
    )
    return [*lines, ""]


def serve_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    document = found.get("serve")
    if document is None:
        return []
    settings = document["settings"]
    runs = {(r["server"], r["mode"], r["load"]): r for r in document["levels"]}
    lines = [
        "## Server mode: tail latency",
        "",
        "`llamacpp-integrations serve` against llama.cpp's `llama-server` over HTTP, the same "
        "streamed chat requests from one load generator, each server alone on the machine "
        f"({where(document)}; {settings['slots']} slots of {settings['ctx_per_slot']} tokens; "
        f"{settings['max_tokens']} tokens per request, greedy; ours queues at most "
        f"{settings['max_queued']} and answers 429 past that). Closed loop: N clients, each "
        "sending its next request when the last one ends. Open loop: Poisson arrivals at a "
        f"rate, for {settings['open_loop_duration_s']:.0f} s. TTFT is time to first token, ITL "
        "the gap between tokens; P99 ratios are ours over llama-server (below 1: ours is "
        "better).",
        "",
        "| load | ours tok/s | llama-server tok/s | ratio | P99 TTFT ours / theirs "
        "| P99 ITL ours / theirs | ours ok / 429 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (server, mode, load), ours in runs.items():
        theirs = runs.get(("llama-server", mode, load))
        if server != "ours" or theirs is None:
            continue
        name = f"{load} concurrent" if mode == "closed" else f"{load:g} req/s"
        ttft = ours["ttft_ms"]["p99"] / theirs["ttft_ms"]["p99"]
        itl = ours["itl_ms"]["p99"] / theirs["itl_ms"]["p99"]
        lines.append(
            f"| {name} | {ours['tok_s']:.0f} | {theirs['tok_s']:.0f} "
            f"| {ours['tok_s'] / theirs['tok_s']:.2f}x "
            f"| {ours['ttft_ms']['p99']:.0f} / {theirs['ttft_ms']['p99']:.0f} ms ({ttft:.2f}x) "
            f"| {ours['itl_ms']['p99']:.0f} / {theirs['itl_ms']['p99']:.0f} ms ({itl:.2f}x) "
            f"| {ours['ok']} / {ours['rejected_429']} |"
        )
        if mode == "closed":
            headline.append(
                f"| server mode vs `llama-server`, {name}: tok/s, P99 TTFT, P99 ITL "
                f"| {ours['tok_s'] / theirs['tok_s']:.2f}x / {ttft:.2f}x / {itl:.2f}x |"
            )
    peers = [r for r in document["levels"] if r["server"] == "llama-cpp-python"]
    if peers:
        lines += [
            "",
            "llama-cpp-python's own server (`python -m llama_cpp.server`), which serves one "
            "request at a time, for the record:",
            "",
            "| load | tok/s | P99 TTFT | P99 ITL | ok | errors |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for run in peers:
            lines.append(
                f"| {run['load']} concurrent | {run['tok_s']:.0f} | {run['ttft_ms']['p99']:.0f} ms "
                f"| {run['itl_ms']['p99']:.0f} ms | {run['ok']} | {run['errors']} |"
            )
    return [*lines, ""]


def speculative_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    lines: list[str] = []
    document = found.get("speculative")
    if document is not None:
        settings = document["settings"]
        lines += [
            "## Speculative decoding (n-gram)",
            "",
            f"Greedy answers of up to {settings['max_tokens']} tokens ({where(document)}); "
            "decode tokens/s leaves prompt evaluation out (single stream) or is the aggregate "
            "(concurrent). (a) quotes a 600-token document (JSON and prose), (b) is free chat, "
            "(c) mixes both, (d) asks (a)'s JSON questions with their schema enforced by a "
            "grammar. See [the guide](guides/speculative.md).",
            "",
            '| workload | `speculative="ngram"` tok/s | off tok/s | ratio | drafts accepted |',
            "|---|---:|---:|---:|---:|",
        ]
        names = {
            "quote": "(a) quote, 1 stream",
            "chat": "(b) chat, 1 stream",
            "json": "(d) JSON schema (grammar), 1 stream",
            "mixed8": "(c) mixed, 8 concurrent",
            "mixed16": "(c) mixed, 16 concurrent",
        }
        for key, row in document["ours"].items():
            accepted = (
                "none drafted"
                if row["acceptance"] is None
                else f"{row['acceptance']:.0%} of {row['drafted']}"
            )
            lines.append(
                f"| {names.get(key, key)} | {row['ngram']:.1f} | {row['off']:.1f} "
                f"| {row['ngram'] / row['off']:.2f}x | {accepted} |"
            )
        quote = document["ours"]["quote"]
        headline.append(
            f"| n-gram speculation, quote workload, 1 stream (vs ours without) "
            f"| {quote['ngram'] / quote['off']:.2f}x |"
        )
        if document["peers"]:
            lines += [
                "",
                "Single stream against the peers (ratio: ours with n-gram speculation / peer):",
                "",
                "| peer | (a) quote tok/s | ours / peer | (b) chat tok/s | ours / peer |",
                "|---|---:|---:|---:|---:|",
            ]
            ours = document["peers"][0]

            def cell(value: float | None, mine: float) -> str:
                return "n/a | n/a" if value is None else f"{value:.1f} | {mine / value:.2f}x"

            for row in document["peers"]:
                lines.append(
                    f"| {row['peer']} | {cell(row['quote'], ours['quote'])} "
                    f"| {cell(row['chat'], ours['chat'])} |"
                )
        lines.append("")
    return lines


def prompt_cache_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    lines: list[str] = []
    cache = found.get("prompt_cache")
    if cache is not None:
        settings = cache["settings"]
        lines += [
            "## Prompt cache on disk",
            "",
            f"Time to first token for a {settings['prompt_tokens']}-token prompt "
            f"({where(cache)}; median of {settings['repeat']}).",
            "",
            "| case | ms | vs cold |",
            "|---|---:|---:|",
        ]
        for row in cache["rows"]:
            lines.append(f"| {row['case']} | {row['ttft_ms']:.0f} | {row['vs_cold']:.2f}x |")
        restart = cache["rows"][-1]
        headline.append(
            f"| prompt cache: time to first token after a restart (vs cold) "
            f"| {restart['vs_cold']:.2f}x |"
        )
        lines.append("")
    return lines


def reproducibility_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    run = found.get("reproducibility")
    if run is None:
        return []
    layout, modes = run["layout"], run["deterministic"]
    names = list(layout)
    lines = [
        "## Reproducibility",
        "",
        f"The prefill layout by block size, 0 is off ({where(run)}; median of "
        f"{run['settings']['rounds']}). Times in seconds; `follow_up_evaluated` is how many "
        "prompt tokens a follow-up turn reads again.",
        "",
        "| figure | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for key in layout[names[0]]:
        lines.append(f"| {key} | " + " | ".join(f"{layout[n][key]:.3f}" for n in names) + " |")
    lines += [
        "",
        "Deterministic mode against the default, 64 greedy tokens per request.",
        "",
        "| concurrent | default tok/s | deterministic tok/s | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for n, pair in modes.items():
        d, s = pair["default"]["tokens_per_s"], pair["deterministic"]["tokens_per_s"]
        lines.append(f"| {n} | {d:.1f} | {s:.1f} | {s / d:.2f}x |")
    if "off" in layout:
        first, off = layout[names[0]], layout["off"]
        ratio = first["long_prompt_tokens_per_s"] / off["long_prompt_tokens_per_s"]
        headline.append(f"| prefill layout ({names[0]}): prompt tokens/s vs off | {ratio:.2f}x |")
    most = modes[max(modes, key=int)]
    ratio = most["deterministic"]["tokens_per_s"] / most["default"]["tokens_per_s"]
    headline.append(
        f"| deterministic mode, {max(modes, key=int)} concurrent: tokens/s | {ratio:.2f}x |"
    )
    lines.append("")
    return lines


def shared_prefix_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    run = found.get("shared_prefix")
    if run is None:
        return []
    figures = run["figures"]
    names = list(figures)
    lines = [
        "## Shared prompt prefixes",
        "",
        f"{run['settings']['n']} chats over one ~1,900-token system prompt sent at once, cold "
        "(nothing cached) and warm (the same again), 32 short documents under one ~900-token "
        "instruction (map, as `abatch` sends them), 8 agents at once for 3 turns each under a "
        "~1,700-token tool listing, and 16 unrelated short chats; 32 greedy "
        f"tokens each ({where(run)}). Seconds.",
        "",
        "| case | figure | " + " | ".join(names) + " |",
        "|---|---|" + "---:|" * len(names),
    ]
    for case in ("cold", "warm", "map", "agents", "unrelated"):
        if case not in figures[names[0]]:
            continue
        for key in ("wall_s", "mean_ttft_s", "p99_ttft_s"):
            cells = " | ".join(f"{figures[name][case][key]:.2f}" for name in names)
            lines.append(f"| {case} | {key} | {cells} |")
    for peer, ratios in run.get("ratios", {}).items():
        headline.append(
            f"| shared prefix, 16 at once, cold: wall vs {peer} | {ratios['cold wall_s']:.2f}x |"
        )
    memory = run.get("default_memory_mib")
    if memory:
        lines += ["", "Resident memory after one short answer with no settings (MiB): "]
        lines[-1] += ", ".join(f"{name} {mib:.0f}" for name, mib in memory.items()) + "."
        if "llama-server" in memory:
            for name in (n for n in memory if n != "llama-server"):
                ratio = memory[name] / memory["llama-server"]
                headline.append(
                    f"| {name}: memory after one answer vs llama-server's default | {ratio:.2f}x |"
                )
    lines.append("")
    return lines


def prefix_lookup_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    run = found.get("prefix_lookup")
    if run is None:
        return []
    settings = run["settings"]
    lines = [
        "## Finding a cached prefix",
        "",
        f"Admitting a {settings['length']:,}-token prompt against slots that each cache "
        f"{settings['length']:,} tokens sharing its first {settings['shared']:,}: the prefix "
        "index's lookup against comparing the prompt with every slot, and the index's upkeep "
        f"while every slot grows a token per step ({where(run)}; best of 20).",
        "",
        "| slots | index (ms) | scan (ms) | index / scan | upkeep (µs per token) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in run["rows"]:
        lines.append(
            f"| {row['slots']} | {row['index_ms']:.3f} | {row['scan_ms']:.3f} "
            f"| {row['index_over_scan']:.3f}x | {row['upkeep_us_per_token']:.2f} |"
        )
    lines.append("")
    return lines


def fairness_section(found: dict[str, dict[str, Any]], headline: list[str]) -> list[str]:
    run = found.get("prefill_fairness")
    if run is None:
        return []
    figures = run["figures"]
    keys = ("gap_p50_ms", "gap_p99_ms", "gap_max_ms", "long_ttft_s")
    lines = [
        "## Streams beside a long prompt",
        "",
        f"{run['settings']['streams']} greedy streams while a ~4,000-token prompt is read: gaps "
        "between their chunks during the read (ms), and the long prompt's time to first token "
        f"(s) ({where(run)}; median of {run['settings']['rounds']}).",
        "",
        "| side | " + " | ".join(keys) + " |",
        "|---|" + "---:|" * len(keys),
    ]
    for name, row in figures.items():
        lines.append(f"| {name} | " + " | ".join(f"{row[k]:.2f}" for k in keys) + " |")
    for name, ratios in run.get("ratios", {}).items():
        headline.append(
            f"| {name}: stream gap P99 beside a long prompt vs llama-server "
            f"| {ratios['gap_p99_ms']:.2f}x |"
        )
    lines.append("")
    return lines


def render(plot: bool = True) -> str:
    """The page's text; ``plot=False`` draws no PNG (figures.py checks the text alone)."""
    DRAW["plots"] = plot
    try:
        return _render()
    finally:
        DRAW["plots"] = True


def _render() -> str:
    found = load()
    headline: list[str] = []
    body = [
        *throughput_section(found, headline),
        *embeddings_section(found, headline),
        *embedding_corpus_section(found, headline),
        *images_section(found, headline),
        *loop_section(found, headline),
        *remote_section(found, headline),
        *remote_embeddings_section(found, headline),
        *serve_section(found, headline),
        *speculative_section(found, headline),
        *prompt_cache_section(found, headline),
        *reproducibility_section(found, headline),
        *shared_prefix_section(found, headline),
        *prefix_lookup_section(found, headline),
        *fairness_section(found, headline),
        *ray_section(found, headline, where),
    ]
    page = [
        "# Benchmarks",
        "",
        "Measured with `make bench-report`, which runs the benchmarks in `benchmarks/` and "
        "renders this page from their results (`benchmarks/results/*.json`). Each comparison "
        "runs both sides in the same run, one at a time, on the same GGUF and thread count; the "
        "ratios are the headline, since absolute times move with the machine. The model is the "
        "test model, SmolLM2-135M-Instruct (Q4_1), on a CPU.",
        "",
        "| headline (ours / peer, same run) | result |",
        "|---|---:|",
        *headline,
        "",
        *body,
    ]
    return "\n".join(page).rstrip() + "\n"


def main() -> None:
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(ROOT)} and {ASSETS.relative_to(ROOT)}/")


if __name__ == "__main__":
    main()
