"""The GPU check (benchmarks/gpu/): without a GPU it says so and exits 0 having run nothing; the
sdist trimming keeps what the builds read and drops the rest; the random-weight models carry
the shape asked for and the tokenizer given; the bundle names files that exist."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
from gguf import GGUFReader, GGUFValueType

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "benchmarks" / "gpu"
CHECK = GPU / "check.sh"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sdist_trim = load("sdist_trim")
random_models = load("random_models")


def fake_nvidia_smi(folder: Path, body: str) -> dict[str, str]:
    """An environment whose ``nvidia-smi`` is a script running ``body``."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return dict(os.environ, PATH=f"{folder}{os.pathsep}{os.environ['PATH']}")


def run_check(bundle: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(bundle / "check.sh"), *args],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A bundle folder holding only the entry script: anything past detection would fail."""
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "check.sh").write_bytes(CHECK.read_bytes())
    (folder / "BUNDLE.json").write_text('{"commit": "test"}')
    return folder


def test_without_nvidia_smi_nothing_runs(bundle: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname",):  # all check.sh needs before it looks for a GPU
        (bin_dir / tool).symlink_to(Path("/usr/bin") / tool)
    done = subprocess.run(
        ["/bin/bash", str(bundle / "check.sh")], env={"PATH": str(bin_dir)},
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "gpu-check: no NVIDIA GPU found; nothing run"
    assert sorted(p.name for p in bundle.iterdir()) == ["BUNDLE.json", "check.sh"]


def test_a_driver_without_devices_is_no_gpu(bundle: Path, tmp_path: Path) -> None:
    env = fake_nvidia_smi(tmp_path / "bin", 'echo "No devices were found"; exit 6')
    done = run_check(bundle, env)
    assert done.returncode == 0
    assert "no NVIDIA GPU found; nothing run" in done.stdout
    assert sorted(p.name for p in bundle.iterdir()) == ["BUNDLE.json", "check.sh"]


def test_the_repository_copy_says_no_gpu_here(tmp_path: Path) -> None:
    env = fake_nvidia_smi(tmp_path / "bin", "exit 9")
    done = run_check(GPU, env)
    assert (done.returncode, done.stdout.strip()) == (
        0,
        "gpu-check: no NVIDIA GPU found; nothing run",
    )


def test_a_gpu_outside_a_bundle_is_refused(tmp_path: Path) -> None:
    env = fake_nvidia_smi(tmp_path / "bin", 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"')
    done = run_check(GPU, env)
    assert done.returncode == 2
    assert "not a bundle" in done.stderr


ROOT_DIR = "llama_cpp_python-0.3.36"
KEPT = [
    "CMakeLists.txt", "pyproject.toml", "README.md", "llama_cpp/llama.py", "llama_cpp/lib",
    "vendor/llama.cpp/CMakeLists.txt", "vendor/llama.cpp/cmake/common.cmake",
    "vendor/llama.cpp/src/llama.cpp", "vendor/llama.cpp/common/arg.cpp",
    "vendor/llama.cpp/ggml/src/ggml.c", "vendor/llama.cpp/ggml/src/ggml-backend.cpp",
    "vendor/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu",
    "vendor/llama.cpp/ggml/src/ggml-cuda/template-instances/fattn-vec-f16.cu",
    "vendor/llama.cpp/ggml/src/ggml-cpu/ops.cpp", "vendor/llama.cpp/tools/CMakeLists.txt",
    "vendor/llama.cpp/tools/server/server.cpp", "vendor/llama.cpp/tools/mtmd/clip.cpp",
    "vendor/llama.cpp/tools/mtmd/debug/mtmd-debug.h",
    "vendor/llama.cpp/tools/ui/CMakeLists.txt", "vendor/llama.cpp/tools/ui/ui.cpp.in",
    "vendor/llama.cpp/tools/llama-bench/llama-bench.cpp",
    "vendor/llama.cpp/scripts/ui-assets.cmake", "vendor/llama.cpp/vendor/miniaudio/miniaudio.h",
]  # fmt: skip
DROPPED = [
    "docs/index.md", "examples/high_level_api/x.py", "tests/test_llama.py", ".github/x.yml",
    "vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf", "vendor/llama.cpp/docs/build.md",
    "vendor/llama.cpp/examples/simple/simple.cpp", "vendor/llama.cpp/tests/test-sampling.cpp",
    "vendor/llama.cpp/.github/workflows/build.yml", "vendor/llama.cpp/.gitignore",
    "vendor/llama.cpp/ggml/src/ggml-metal/ggml-metal.m",
    "vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp",
    "vendor/llama.cpp/ggml/src/ggml-sycl/ggml-sycl.cpp",
    "vendor/llama.cpp/tools/cli/cli.cpp", "vendor/llama.cpp/tools/quantize/quantize.cpp",
    "vendor/llama.cpp/tools/server/tests/unit/test_basic.py",
    "vendor/llama.cpp/tools/mtmd/test-2.mp3", "vendor/llama.cpp/tools/mtmd/tests/x.sh",
    "vendor/llama.cpp/tools/ui/src/app.ts", "vendor/llama.cpp/tools/ui/package-lock.json",
    "vendor/llama.cpp/scripts/sync-ggml.sh", "vendor/llama.cpp/gguf-py/gguf/__init__.py",
]  # fmt: skip


@pytest.mark.parametrize("path", KEPT)
def test_trimming_keeps_what_the_builds_read(path: str) -> None:
    assert sdist_trim.keep(f"{ROOT_DIR}/{path}")


@pytest.mark.parametrize("path", DROPPED)
def test_trimming_drops_the_rest(path: str) -> None:
    assert not sdist_trim.keep(f"{ROOT_DIR}/{path}")


def test_trim_sdist_writes_the_kept_members(tmp_path: Path) -> None:
    source, target = tmp_path / "in.tar.gz", tmp_path / "out.tar.gz"
    with tarfile.open(source, "w:gz") as archive:
        for path in [*KEPT[:3], *DROPPED[:3]]:
            data = path.encode()
            member = tarfile.TarInfo(f"{ROOT_DIR}/{path}")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    assert sdist_trim.trim_sdist(source, target) == (3, 3)
    with tarfile.open(target) as archive:
        names = archive.getnames()
        assert names == [f"{ROOT_DIR}/{path}" for path in KEPT[:3]]
        member = archive.extractfile(names[1])
        assert member is not None and member.read() == KEPT[1].encode()


TOKENIZER = [
    {"key": "tokenizer.ggml.model", "type": int(GGUFValueType.STRING), "sub_type": None,
     "value": "gpt2"},
    {"key": "tokenizer.ggml.tokens", "type": int(GGUFValueType.ARRAY),
     "sub_type": int(GGUFValueType.STRING), "value": ["<|endoftext|>", "a", "b", "ab", "Ġ"]},
    {"key": "tokenizer.ggml.token_type", "type": int(GGUFValueType.ARRAY),
     "sub_type": int(GGUFValueType.INT32), "value": [3, 1, 1, 1, 1]},
    {"key": "tokenizer.ggml.merges", "type": int(GGUFValueType.ARRAY),
     "sub_type": int(GGUFValueType.STRING), "value": ["a b"]},
    {"key": "tokenizer.ggml.eos_token_id", "type": int(GGUFValueType.UINT32), "sub_type": None,
     "value": 0},
    {"key": "tokenizer.chat_template", "type": int(GGUFValueType.STRING), "sub_type": None,
     "value": "{{ messages[0]['content'] }}"},
]  # fmt: skip


def test_random_model_has_its_shape_and_the_tokenizer(tmp_path: Path) -> None:
    shape = random_models.Shape(n_embd=32, n_layer=2, n_head=4, n_head_kv=2, n_ff=48)
    path = random_models.write_model(tmp_path / "m.gguf", "micro", shape, TOKENIZER, seed=3)
    reader = GGUFReader(path)
    fields = {key: field.contents() for key, field in reader.fields.items()}
    assert fields["general.architecture"] == "llama"
    assert fields["llama.block_count"] == 2
    assert fields["llama.embedding_length"] == 32
    assert fields["llama.attention.head_count_kv"] == 2
    assert fields["llama.vocab_size"] == 5
    # The tokenizer comes back as it was saved, and extracting it again gives the same.
    assert random_models.extract_tokenizer(path) == TOKENIZER
    tensors = {t.name: t for t in reader.tensors}
    assert sum(int(t.n_elements) for t in reader.tensors) == shape.n_params(5)
    assert tuple(tensors["blk.1.attn_k.weight"].data.shape) == (16, 32)  # 2 KV heads of 8
    assert "output.weight" not in tensors  # tied to the token embeddings
    weights = tensors["blk.0.ffn_up.weight"].data
    assert 0.01 < float(weights.astype("float32").std()) < 0.03
    assert not (weights == tensors["blk.1.ffn_up.weight"].data).all()


def test_tokenizer_file_round_trips(tmp_path: Path) -> None:
    random_models.save_tokenizer(TOKENIZER, tmp_path / "t.json.xz")
    assert random_models.load_tokenizer(tmp_path / "t.json.xz") == TOKENIZER


def test_sizes_are_what_they_are_called() -> None:
    n_vocab = 49152  # SmolLM2's
    billions = {name: s.n_params(n_vocab) / 1e9 for name, s in random_models.SIZES.items()}
    assert 0.4 < billions["0.5b"] < 0.6
    assert 1.3 < billions["1.5b"] < 1.7
    assert 2.7 < billions["3b"] < 3.3
    assert billions["tiny"] < 0.05


def test_the_bundle_carries_files_that_exist() -> None:
    bundle = load("bundle")
    for name in bundle.REPO_FILES:
        assert (ROOT / name).is_file(), name
