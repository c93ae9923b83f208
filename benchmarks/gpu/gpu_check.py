"""The GPU check, unattended and offline, from the folder ``make gpu-bundle`` wrote (``check.sh``
runs this with the system's Python 3.11 or 3.12; standard library only).

Steps, each timed, every command's output in ``results/check.log``:

1. a venv in the work folder, from the bundle's wheels only (``--no-index``);
2. CMake: the system's if it is 3.21 or newer, else the bundle's;
3. llama-cpp-python compiled from the bundle's trimmed sdist, with CUDA for this card's compute
   capability only (``--cpu``: CUDA off), kept in the work folder so a second run reuses it;
4. llama-server compiled from the same sources against the libraries step 3 built
   (``benchmarks/llama_tools/CMakeLists.txt``: only llama.cpp's common library and the server);
5. the random-weight models (``random_models.py``), written while steps 3 and 4 compile;
6. the measurements (``measure.py``), every layer offloaded, and ``<prefix>_check.json`` with
   the device and each step's time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import IO, Any

BASE_REQUIREMENTS = [
    "numpy", "pydantic", "jinja2", "diskcache", "typing-extensions", "pyyaml", "tqdm",
    "scikit-build-core", "ninja",
]  # fmt: skip
# Installed without their declared dependencies: gguf's (requests) are not used to write a
# model, and the package's Pillow only reads images, which no measurement sends.
NO_DEPS = ["gguf", "llamacpp-integrations"]
MIN_CMAKE = (3, 21)
# What each path measures by default: the GPU's three sizes, the CPU path's tiny model.
DEFAULTS = {
    "gpu": {"sizes": "0.5b,1.5b,3b", "max_tokens": 128, "embed_texts": 1024},
    "cpu": {"sizes": "tiny", "max_tokens": 16, "embed_texts": 64},
}


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.bundle: Path = args.bundle.resolve()
        self.work: Path = (args.work or self.bundle / "work").resolve()
        self.results: Path = (args.results or self.bundle / "results").resolve()
        self.mode = "cpu" if args.cpu else "gpu"
        self.args = args
        self.jobs = str(args.jobs or os.cpu_count() or 1)
        # pip sees the bundle's wheels only: no index, and no configuration of this machine's.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        self.env |= {"CMAKE_BUILD_PARALLEL_LEVEL": self.jobs, "PIP_NO_INDEX": "1",
                     "PIP_CONFIG_FILE": os.devnull}  # fmt: skip
        self.times: dict[str, float] = {}
        self.results.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        self.log: IO[str] = open(self.results / "check.log", "a", encoding="utf-8")  # noqa: SIM115
        self.venv = self.work / f"venv-py{sys.version_info[0]}{sys.version_info[1]}"
        self.python = self.venv / "bin" / "python"

    # ---- helpers --------------------------------------------------------------------------

    def say(self, line: str) -> None:
        print(f"gpu-check: {line}", flush=True)
        self.log.write(f"## {line}\n")
        self.log.flush()

    def run(self, command: list[str], **kwargs: Any) -> None:
        self.log.write(f"$ {' '.join(command)}\n")
        self.log.flush()
        done = subprocess.run(
            command, stdout=self.log, stderr=subprocess.STDOUT, env=self.env, check=False,
            **kwargs,
        )  # fmt: skip
        if done.returncode != 0:
            self.fail(f"{command[0]} exited with {done.returncode}")

    def fail(self, why: str) -> None:
        self.log.flush()
        tail = (self.results / "check.log").read_text(errors="replace").splitlines()[-40:]
        print("\n".join(tail), file=sys.stderr)
        self.say(f"FAILED: {why} (the whole log: {self.results / 'check.log'})")
        self.write_summary(ok=False, why=why)
        sys.exit(1)

    def step(self, name: str, fn: Any) -> None:
        start = time.monotonic()
        self.say(f"{name}...")
        fn()
        self.times[name] = round(time.monotonic() - start, 1)
        self.say(f"{name}: {self.times[name]:.0f} s")

    def pip(self, *args: str) -> None:
        wheels = str(self.bundle / "wheels")
        self.run([str(self.python), "-m", "pip", "install", "--no-index", "--find-links", wheels,
                  "--disable-pip-version-check", *args])  # fmt: skip

    # ---- the device -----------------------------------------------------------------------

    def device(self) -> dict[str, Any]:
        if self.mode == "cpu":
            return {"kind": "cpu", "name": cpu_name(), "cores": os.cpu_count()}
        fields = "name,compute_cap,memory.total,driver_version"
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True, text=True, check=True,
        ).stdout.splitlines()[0]  # fmt: skip
        name, capability, memory, driver = (part.strip() for part in out.split(","))
        return {
            "kind": "cuda", "name": name, "compute_capability": capability,
            "memory_total": memory, "driver": driver, "cpu": cpu_name(), "cores": os.cpu_count(),
        }  # fmt: skip

    # ---- the steps ------------------------------------------------------------------------

    def make_venv(self) -> None:
        if not self.python.exists():
            self.run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)])
            (pip_wheel,) = (self.bundle / "wheels").glob("pip-*.whl")
            self.run([str(self.python), str(pip_wheel / "pip"), "install", "--no-index",
                      "--find-links", str(self.bundle / "wheels"), "--quiet", "pip"])  # fmt: skip
        self.pip("--quiet", *BASE_REQUIREMENTS)
        self.pip("--quiet", "--no-deps", "--force-reinstall", *NO_DEPS)

    def find_cmake(self) -> None:
        system = shutil.which("cmake")
        if system is not None and cmake_version(system) >= MIN_CMAKE:
            self.say(f"cmake: the system's ({system})")
            return
        target = self.work / "cmake"
        if not (target / "bin" / "cmake").exists():
            with tarfile.open(self.bundle / "tools" / "cmake.tar.xz") as archive:
                extract(archive, target)
        self.env["PATH"] = f"{target / 'bin'}{os.pathsep}{self.env['PATH']}"
        self.say(f"cmake: the bundle's ({target / 'bin' / 'cmake'})")

    def cuda_args(self) -> list[str]:
        if self.mode == "cpu":
            return ["-DGGML_CUDA=off"]
        nvcc = shutil.which("nvcc") or next(
            (str(p) for p in Path("/usr/local").glob("cuda*/bin/nvcc")), None
        )
        if nvcc is None:
            self.fail("no nvcc (CUDA's compiler) on PATH or under /usr/local/cuda*/bin")
        assert nvcc is not None
        self.env["CUDACXX"] = nvcc
        lib64 = Path(nvcc).resolve().parents[1] / "lib64"
        self.env["LD_LIBRARY_PATH"] = f"{lib64}{os.pathsep}{self.env.get('LD_LIBRARY_PATH', '')}"
        arch = self.device_info["compute_capability"].replace(".", "")
        return ["-DGGML_CUDA=on", f"-DCMAKE_CUDA_ARCHITECTURES={arch}"]

    def build_llama_cpp_python(self) -> None:
        stamp = self.work / f"llama-cpp-python-{self.mode}.built"
        if stamp.exists():
            self.say(f"llama-cpp-python: built before ({stamp.name})")
            return
        self.env["CMAKE_ARGS"] = " ".join(self.cmake_args)
        build_dir = self.work / "build" / f"llama-cpp-python-{self.mode}"
        # Built from one unpacked copy, so that a second run finds its CMake cache's sources.
        self.pip("--no-build-isolation", "--no-deps", "--force-reinstall", "--verbose",
                 f"--config-settings=build-dir={build_dir}", str(self.source()))  # fmt: skip
        stamp.touch()

    def build_server(self) -> None:
        binary = self.server_binary
        if binary.exists():
            self.say(f"llama-server: built before ({binary})")
            return
        root = self.source()
        sys.path.insert(0, str(self.bundle / "repo" / "benchmarks" / "llama_tools"))
        from build import project_dir  # benchmarks/llama_tools/build.py

        scratch = self.work / "build" / f"llama-server-{self.mode}"
        shutil.rmtree(scratch, ignore_errors=True)
        project = project_dir(root / "vendor" / "llama.cpp", scratch / "project")
        bin_dir = scratch / "build" / "bin"
        bin_dir.mkdir(parents=True)
        libs = self.wheel_lib()
        for lib in libs.glob("lib*.so*"):
            shutil.copy(lib, bin_dir / lib.name)
        # The server links against the wheel's libggml, which needs libggml-cuda and that the
        # CUDA runtime: found when the server runs (LD_LIBRARY_PATH), not needed to link it.
        flags = f"-Wl,--allow-shlib-undefined -Wl,-rpath-link,{bin_dir}"
        configure = [
            "cmake", "-S", str(project), "-B", str(scratch / "build"), "-DCMAKE_BUILD_TYPE=Release",
            f"-DWHEEL_LIB={bin_dir}", f"-DCMAKE_EXE_LINKER_FLAGS={flags}",
            "-DLLAMA_BUILD_COMMIT=gpu-check",
        ]  # fmt: skip
        if shutil.which("ninja", path=self.env["PATH"]) or (self.venv / "bin" / "ninja").exists():
            configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={self.ninja()}"]
        self.run(configure)
        self.run(["cmake", "--build", str(scratch / "build"), "--target", "llama-server",
                  "-j", self.jobs])  # fmt: skip

    def source(self) -> Path:
        """The trimmed sdist, unpacked once into the work folder."""
        (sdist,) = (self.bundle / "src").glob("llama_cpp_python-*.tar.gz")
        src = self.work / "src"
        if not src.exists():
            with tarfile.open(sdist) as archive:
                extract(archive, src)
        (root,) = src.glob("llama_cpp_python-*")
        return root

    def ninja(self) -> str:
        return shutil.which("ninja", path=self.env["PATH"]) or str(self.venv / "bin" / "ninja")

    def wheel_lib(self) -> Path:
        found = subprocess.run(
            [str(self.python), "-c",
             "import importlib.util as u; print(u.find_spec('llama_cpp').origin)"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        return Path(found).parent / "lib"

    @property
    def server_binary(self) -> Path:
        return self.work / "build" / f"llama-server-{self.mode}" / "build" / "bin" / "llama-server"

    def start_models(self) -> subprocess.Popen[bytes]:
        self.log.write("$ random_models.py (in the background)\n")
        self.log.flush()
        return subprocess.Popen(
            [str(self.python), str(self.repo_gpu / "random_models.py"), "--tokenizer",
             str(self.bundle / "tokenizer.json.xz"), "--out", str(self.work / "models"),
             "--sizes", self.sizes],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env,
        )  # fmt: skip

    def measure(self) -> None:
        bundle_info = json.loads((self.bundle / "BUNDLE.json").read_text())
        self.run([
            str(self.python), str(self.repo_gpu / "measure.py"),
            "--server", str(self.server_binary), "--models", str(self.work / "models"),
            "--sizes", self.sizes, "--levels", self.args.levels,
            "--max-tokens", str(self.args.max_tokens or DEFAULTS[self.mode]["max_tokens"]),
            "--embed-texts", str(self.args.embed_texts or DEFAULTS[self.mode]["embed_texts"]),
            "--gpu-layers", "0" if self.mode == "cpu" else "-1",
            "--device", json.dumps(self.device_info), "--prefix", self.mode,
            "--results", str(self.results), "--commit", bundle_info["commit"],
        ])  # fmt: skip

    @property
    def repo_gpu(self) -> Path:
        return self.bundle / "repo" / "benchmarks" / "gpu"

    @property
    def sizes(self) -> str:
        return str(self.args.sizes or DEFAULTS[self.mode]["sizes"])

    def write_summary(self, *, ok: bool, why: str = "") -> None:
        info = json.loads((self.bundle / "BUNDLE.json").read_text())
        summary = {
            "benchmark": f"{self.mode}_check",
            "ok": ok,
            "failure": why or None,
            "device": getattr(self, "device_info", None),
            "machine": {"cpu": cpu_name(), "cores": os.cpu_count(),
                        "python": platform.python_version(), "commit": info["commit"],
                        "date": time.strftime("%Y-%m-%d")},
            "settings": {
                "mode": self.mode, "sizes": self.sizes, "levels": self.args.levels,
                "max_tokens": self.args.max_tokens or DEFAULTS[self.mode]["max_tokens"],
                "embed_texts": self.args.embed_texts or DEFAULTS[self.mode]["embed_texts"],
                "jobs": int(self.jobs),
            },
            "step_seconds": self.times,
            # The whole run's wall time once it ended; before that, the steps done so far.
            "total_s": self.times.get("total", round(sum(self.times.values()), 1)),
        }  # fmt: skip
        path = self.results / f"{self.mode}_check.json"
        path.write_text(json.dumps(summary, indent=1) + "\n")

    def main(self) -> None:
        start = time.monotonic()
        self.device_info = self.device()
        self.say(f"{self.mode} path on {self.device_info['name']}, {self.jobs} jobs")
        self.cmake_args = self.cuda_args()  # also puts CUDA's libraries on the search path
        self.step("venv", self.make_venv)
        models = self.start_models()
        self.step("cmake", self.find_cmake)
        self.step("llama-cpp-python", self.build_llama_cpp_python)
        self.step("llama-server", self.build_server)
        waited = time.monotonic()
        if models.wait() != 0:
            self.fail("random_models.py failed")
        self.times["models (after the builds)"] = round(time.monotonic() - waited, 1)
        self.step("measure", self.measure)
        self.times["total"] = round(time.monotonic() - start, 1)
        self.write_summary(ok=True)
        self.say(f"done in {self.times['total']:.0f} s; results in {self.results}")


def cmake_version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"(\d+)\.(\d+)", out.stdout)
    return tuple(int(part) for part in found.groups()) if found else (0,)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def extract(archive: tarfile.TarFile, target: Path) -> None:
    if hasattr(tarfile, "data_filter"):
        archive.extractall(target, filter="data")
    else:  # a Python 3.11 before 3.11.4
        archive.extractall(target)  # the bundle's own archive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true", help="the CPU path: CUDA off, no GPU")
    parser.add_argument("--work", type=Path, help="venv, builds, models (default: bundle/work)")
    parser.add_argument("--results", type=Path, help="results (default: bundle/results)")
    parser.add_argument("--sizes", help="models (gpu: 0.5b,1.5b,3b; cpu: tiny)")
    parser.add_argument("--levels", default="1,16,64", help="concurrent requests")
    parser.add_argument("--max-tokens", type=int, help="a request's length (gpu 128, cpu 16)")
    parser.add_argument("--embed-texts", type=int, help="texts embedded (gpu 1024, cpu 64)")
    parser.add_argument("--jobs", type=int, help="compile jobs (default: every core)")
    Check(parser.parse_args()).main()


if __name__ == "__main__":
    main()
