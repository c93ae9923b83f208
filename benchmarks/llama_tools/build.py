"""Build llama.cpp's llama-server and llama-bench once per llama-cpp-python build, and link them
where the benchmarks and the live tests look (``.cache/llama-server/build/bin/``).

llama-cpp-python has already compiled llama.cpp (libllama, libggml*, libmtmd) into the venv.
The programs are built from the same sources (its sdist's vendored llama.cpp) against copies
of those libraries, so only llama.cpp's common library and the two programs compile, and the
peers run exactly the kernels our engine runs. The result is kept outside the checkout, under
``$XDG_CACHE_HOME/llamacpp-integrations/llama-tools/<key>`` (``~/.cache`` by default), keyed by
the libraries' bytes, the sdist's and this folder's CMake file: a new clone on the same machine
links the programs again without compiling anything.

Usage: python benchmarks/llama_tools/build.py --out .cache/llama-server/build/bin
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tools_cache import cache_root, digest, link_programs

HERE = Path(__file__).resolve().parent
PROGRAMS = ("llama-server", "llama-bench")
LIBRARIES = ("libggml-base.so", "libggml-cpu.so", "libggml.so", "libllama.so", "libmtmd.so")


def wheel_lib() -> Path:
    """The folder of the installed llama-cpp-python's shared libraries (without importing it,
    which would load them)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        sys.exit("llama-cpp-python is not installed in this environment (make install)")
    return Path(spec.origin).parent / "lib"


def download_sdist(version: str, into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
         "--no-deps", "-d", str(into), f"llama-cpp-python=={version}"],
        check=True,
    )  # fmt: skip
    (sdist,) = into.glob("llama_cpp_python-*.tar.gz")
    return sdist


def project_dir(llama_cpp: Path, where: Path) -> Path:
    """A folder holding this CMake file beside links to every entry of the llama.cpp tree, so
    llama.cpp's own CMake files find what they include relative to the project's root."""
    where.mkdir(parents=True)
    for entry in llama_cpp.iterdir():
        if entry.name != "CMakeLists.txt":
            (where / entry.name).symlink_to(entry)
    shutil.copy(HERE / "CMakeLists.txt", where / "CMakeLists.txt")
    return where


def build(version: str, libs: Path, sdist: Path, target: Path) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="llama-tools-", dir=target.parent))
    try:
        with tarfile.open(sdist) as archive:
            archive.extractall(scratch / "src", filter="data")
        (root,) = (scratch / "src").glob("llama_cpp_python-*")
        project = project_dir(root / "vendor" / "llama.cpp", scratch / "project")
        bin_dir = scratch / "build" / "bin"
        bin_dir.mkdir(parents=True)
        for name in LIBRARIES:  # followed through the .so -> .so.0 -> .so.0.x links
            shutil.copy(libs / name, bin_dir / name)
            soname = (
                subprocess.run(
                    ["objdump", "-p", str(libs / name)], capture_output=True, text=True, check=True
                )
                .stdout.split("SONAME", 1)[1]
                .split()[0]
            )
            if soname != name:
                (bin_dir / soname).symlink_to(name)
        subprocess.run(
            ["cmake", "-S", str(project), "-B", str(scratch / "build"),
             "-DCMAKE_BUILD_TYPE=Release", f"-DWHEEL_LIB={bin_dir}",
             f"-DLLAMA_BUILD_COMMIT=llama-cpp-python-{version}"],
            check=True,
        )  # fmt: skip
        subprocess.run(
            ["cmake", "--build", str(scratch / "build"), "--target", *PROGRAMS,
             "-j", os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")],
            check=True,
        )  # fmt: skip
        target.mkdir(parents=True)
        for path in bin_dir.iterdir():
            shutil.move(str(path), target / path.name)
        (target / "VERSION").write_text(f"llama-cpp-python {version}\n")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where to link the programs")
    args = parser.parse_args()
    version = importlib.metadata.version("llama-cpp-python")
    libs = wheel_lib()
    with tempfile.TemporaryDirectory() as downloads:
        sdist = download_sdist(version, Path(downloads))
        key = digest([*(libs / name for name in LIBRARIES), sdist, HERE / "CMakeLists.txt"])
        target = cache_root("llama-tools") / f"{version}-{key}"
        if all((target / name).is_file() for name in PROGRAMS):
            print(f"llama tools: reusing {target}")
        else:
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            build(version, libs, sdist, target)
    link_programs(PROGRAMS, target, args.out)
    print(f"llama tools: {', '.join(PROGRAMS)} in {args.out} -> {target}")


if __name__ == "__main__":
    main()
