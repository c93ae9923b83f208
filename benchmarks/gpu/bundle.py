"""``make gpu-bundle``: everything the GPU check needs on a machine with no network, in one
folder (``.cache/gpu-bundle`` by default), under 60 MB:

* ``check.sh``, the entry point, and ``repo/``: the check's scripts and the benchmarks they run;
* ``src/``: llama-cpp-python's sdist, llama.cpp trimmed to what the builds read
  (``sdist_trim.py``);
* ``wheels/``: the Python dependencies for CPython 3.11 and 3.12 (manylinux x86_64), pip, the
  build's (scikit-build-core, ninja) and this package's own wheel;
* ``tools/cmake.tar.xz``: CMake's program and modules, used where the system has no CMake 3.21;
* ``tokenizer.json.xz``: SmolLM2's tokenizer keys, for the random-weight models
  (``random_models.py``);
* ``BUNDLE.json``: the commit, versions and sizes.

    python benchmarks/gpu/bundle.py [--out .cache/gpu-bundle] [--sdist llama_cpp_python-X.tar.gz]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from gpu_check import BASE_REQUIREMENTS  # noqa: E402
from random_models import extract_tokenizer, save_tokenizer  # noqa: E402
from sdist_trim import trim_sdist  # noqa: E402

LIMIT = 60 * 1000 * 1000
PYTHONS = ("3.11", "3.12")
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
# What of this repository the check runs (benchmarks and the server process helper).
REPO_FILES = (
    "benchmarks/results.py", "benchmarks/throughput.py", "benchmarks/llama_server.py",
    "benchmarks/embeddings.py", "benchmarks/shared_prefix.py", "benchmarks/server_chat.py",
    "benchmarks/llama_tools/build.py", "benchmarks/llama_tools/tools_cache.py",
    "benchmarks/llama_tools/CMakeLists.txt", "benchmarks/gpu/gpu_check.py",
    "benchmarks/gpu/measure.py", "benchmarks/gpu/random_models.py", "tests/__init__.py",
    "tests/live/__init__.py", "tests/live/llama_servers.py",
)  # fmt: skip
# CMake's program and what it reads at run time (no ctest, cpack, docs or editor files).
CMAKE_KEPT = ("bin/cmake", "/Modules/", "/Templates/")
TOKENIZER_MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


def pip_download(into: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "-d", str(into), *args],
        check=True,
    )  # fmt: skip


def binary_args(python: str) -> list[str]:
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    return ["--only-binary", ":all:", *platforms, "--python-version", python,
            "--implementation", "cp"]  # fmt: skip


def wheels(into: Path, downloads: Path) -> None:
    """Both Pythons' wheels (one copy of each pure wheel), pip and this package's wheel."""
    into.mkdir(parents=True)
    for python in PYTHONS:
        got = downloads / python
        pip_download(got, *binary_args(python), *BASE_REQUIREMENTS, "pip")
        pip_download(got, *binary_args(python), "--no-deps", "gguf")
        for wheel in got.glob("*.whl"):
            shutil.copy(wheel, into / wheel.name)
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "src"
        source.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            shutil.copy(ROOT / name, source / name)
        shutil.copytree(
            ROOT / "llamacpp_integrations", source / "llamacpp_integrations",
            ignore=shutil.ignore_patterns("__pycache__"),
        )  # fmt: skip
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
             "--no-build-isolation", "-w", str(into), str(source)],
            check=True,
        )  # fmt: skip


def cmake_archive(target: Path, downloads: Path) -> None:
    """The CMake wheel's program and modules, as ``bin/`` and ``share/`` in a ``.tar.xz``."""
    got = downloads / "cmake"
    pip_download(got, *binary_args(PYTHONS[0]), "--no-deps", "cmake")
    (wheel,) = got.glob("cmake-*.whl")
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive, tarfile.open(target, "w:xz", preset=6) as out:
        for info in archive.infolist():
            if info.is_dir() or not info.filename.startswith("cmake/data/"):
                continue
            name = info.filename.removeprefix("cmake/data/")
            if not (name == CMAKE_KEPT[0] or any(part in name for part in CMAKE_KEPT[1:])):
                continue
            data = archive.read(info)
            member = tarfile.TarInfo(name)
            member.size = len(data)
            member.mode = 0o755 if name.startswith("bin/") else 0o644
            out.addfile(member, io.BytesIO(data))


def sdist_path(given: Path | None, downloads: Path) -> Path:
    if given is not None:
        return given
    version = importlib.metadata.version("llama-cpp-python")
    got = downloads / "sdist"
    existing = list(got.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not existing:
        pip_download(got, "--no-binary", ":all:", "--no-deps", f"llama-cpp-python=={version}")
    (sdist,) = got.glob(f"llama_cpp_python-{version}.tar.gz")
    return sdist


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return git("rev-parse", "HEAD") + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "gpu-bundle")
    parser.add_argument("--sdist", type=Path, help="llama-cpp-python's sdist (else downloaded)")
    parser.add_argument("--downloads", type=Path, default=ROOT / ".cache" / "gpu-downloads")
    parser.add_argument("--json", type=Path, help="also write the sizes as a results file")
    args = parser.parse_args()
    out: Path = args.out
    shutil.rmtree(out, ignore_errors=True)
    (out / "src").mkdir(parents=True)
    sdist = sdist_path(args.sdist, args.downloads)
    kept, dropped = trim_sdist(sdist, out / "src" / sdist.name)
    print(f"gpu-bundle: {sdist.name} trimmed: {kept} files kept, {dropped} dropped")
    wheels(out / "wheels", args.downloads)
    cmake_archive(out / "tools" / "cmake.tar.xz", args.downloads)
    models = Path(os.environ.get("LLAMACPP_INTEGRATIONS_MODELS", ROOT / ".cache" / "models"))
    save_tokenizer(extract_tokenizer(models / TOKENIZER_MODEL), out / "tokenizer.json.xz")
    for name in REPO_FILES:
        (out / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, out / "repo" / name)
    shutil.copy(HERE / "check.sh", out / "check.sh")
    (out / "check.sh").chmod(0o755)
    parts = {
        name: size_of(out / name) if (out / name).is_dir() else (out / name).stat().st_size
        for name in ("src", "wheels", "tools", "repo", "tokenizer.json.xz")
    }
    info = {
        "commit": commit(),
        "date": datetime.date.today().isoformat(),
        "llama_cpp_python_sdist": sdist.name,
        "pythons": list(PYTHONS),
        "wheels": sorted(p.name for p in (out / "wheels").glob("*.whl")),
        "bytes": parts,
    }
    (out / "BUNDLE.json").write_text(json.dumps(info, indent=1) + "\n")
    total = size_of(out)
    shares = ", ".join(f"{name} {size / 1e6:.1f}" for name, size in parts.items())
    print(f"gpu-bundle: {out} holds {total / 1e6:.1f} MB ({shares})")
    if args.json is not None:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import results

        settings = {"pythons": list(PYTHONS), "platforms": list(PLATFORMS), "limit_bytes": LIMIT}
        results.write(args.json, "gpu_bundle", settings, total_bytes=total, **info)
    if total >= LIMIT:
        sys.exit(f"gpu-bundle: {total / 1e6:.1f} MB is over the {LIMIT / 1e6:.0f} MB limit")


if __name__ == "__main__":
    main()
