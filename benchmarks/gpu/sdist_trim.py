"""What of llama-cpp-python's sdist the GPU check builds from: its Python package and the
vendored llama.cpp less everything no build step reads (models' vocabularies, docs, examples,
tests, the web UI's sources, tools other than the server, ggml backends other than CPU and
CUDA). Pure: ``keep`` decides on a path inside the sdist, ``trim_sdist`` writes the result."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path, PurePosixPath

__all__ = ["keep", "trim_sdist"]

LLAMA = ("vendor", "llama.cpp")
# Top-level folders of the sdist (beside llama_cpp/ and vendor/) no build reads.
SDIST_DROPPED = {"docs", "examples", "tests", "docker", "scripts", ".github"}
# Folders of llama.cpp no build of the libraries, the server or llama-bench reads.
LLAMA_DROPPED = {
    "models", "docs", "examples", "tests", "benches", "media", ".github", ".devops",
    "conversion", "gguf-py", "pocs", "grammars", "requirements", "prompts", "licenses",
    "app", "ci", "scripts", "tools",
}  # fmt: skip
# What is kept of those dropped folders: scripts read by CMake, and the tools built.
LLAMA_KEPT_UNDER = {
    "scripts": {"ui-assets.cmake", "build-info.sh", "xxd.cmake"},
    "tools": {"CMakeLists.txt", "server", "mtmd", "ui", "llama-bench"},
}
# Inside the kept tools: their tests and sample media, the web UI's sources (the server is
# built without its web page).
TOOL_DROPPED = {
    "server": {"tests", "webui", "public", "bench"},
    "mtmd": {"tests", "legacy-models"},  # (not debug/: mtmd.cpp includes its header)
    "ui": {"src", "static", "tests", ".storybook", "package-lock.json", "package.json"},
}
MEDIA_SUFFIXES = {".mp3", ".mp4", ".jpeg", ".jpg", ".png", ".gif", ".wav", ".gguf", ".pdf"}
GGML_BACKENDS_KEPT = {"ggml-cpu", "ggml-cuda"}


def keep(path: str) -> bool:
    """Whether the sdist member ``path`` (``llama_cpp_python-X/...``) goes into the trimmed
    sdist."""
    parts = PurePosixPath(path).parts[1:]  # below the sdist's own folder
    if not parts:
        return True
    if any(part.startswith(".git") for part in parts):
        return False
    if PurePosixPath(path).suffix.lower() in MEDIA_SUFFIXES:
        return False
    if parts[0] in SDIST_DROPPED:
        return False
    if parts[: len(LLAMA)] != LLAMA or len(parts) == len(LLAMA):
        return True
    inner = parts[len(LLAMA) :]
    top = inner[0]
    if top in LLAMA_DROPPED:
        kept = LLAMA_KEPT_UNDER.get(top)
        if kept is None or (len(inner) > 1 and inner[1] not in kept):
            return False
        tool_part = inner[2] if top == "tools" and len(inner) > 2 else None
        return tool_part not in TOOL_DROPPED.get(inner[1], ())
    if top == "ggml" and inner[1:2] == ("src",) and len(inner) > 3:
        # ggml/src/<backend>/...: only the backends built
        return not inner[2].startswith("ggml-") or inner[2] in GGML_BACKENDS_KEPT
    return True


def trim_sdist(source: Path, target: Path) -> tuple[int, int]:
    """Write ``target`` (a ``.tar.gz``) from ``source`` with only the kept members; return
    (members kept, members dropped)."""
    kept = dropped = 0
    with tarfile.open(source) as src, tarfile.open(target, "w:gz", compresslevel=9) as out:
        for member in src:
            if not keep(member.name):
                dropped += 1
                continue
            data = src.extractfile(member) if member.isfile() else None
            out.addfile(member, io.BytesIO(data.read()) if data is not None else None)
            kept += 1
    return kept, dropped
