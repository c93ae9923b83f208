"""``hf://`` specs resolved through the real ``huggingface_hub`` against a local fake Hub."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.errors import MissingDependencyError, ModelLoadError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.models import (
    cached_model_info,
    parse_hub_spec,
    resolve_hub_model,
    resolve_mmproj_path,
    resolve_model_path,
)
from tests.builders.fake_hub import FakeHub, FakeRepo, point_huggingface_hub_at, serve_fake_hub

hf_constants = pytest.importorskip("huggingface_hub.constants")


def tiny_gguf(tmp_path: Path, name: str, *, context: int = 1024) -> bytes:
    """A valid GGUF of a few hundred bytes (a header the package can read)."""
    path = tmp_path / f"{name}.gguf"
    writer = GGUFWriter(str(path), arch="llama")
    writer.add_name(name)
    writer.add_context_length(context)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A fake Hub with three repos; huggingface_hub pointed at it, with an empty cache."""
    model = tiny_gguf(tmp_path, "Tiny")
    repos = {
        "acme/tiny-GGUF": FakeRepo(
            {
                "README.md": b"# tiny\n",
                "tiny-Q4_K_M.gguf": model,
                "tiny.q8_0.gguf": b"q8" * 100,
                "tiny-F16.gguf": b"f16" * 100,
                "mmproj-tiny-F16.gguf": b"proj16",
                "mmproj-tiny-F32.gguf": b"proj32",
                "nested/dir/other-IQ4_XS.gguf": b"iq4" * 10,
            }
        ),
        "acme/split-GGUF": FakeRepo(
            {
                **{f"Q4_K_M/big-Q4_K_M-0000{i}-of-00003.gguf": bytes([i]) * 50 for i in (1, 2, 3)},
                "big-Q8_0-00001-of-00002.gguf": b"only the first part",
            }
        ),
        "acme/one": FakeRepo({"only.gguf": b"one"}),
    }
    with serve_fake_hub(FakeHub(repos)) as server:
        point_huggingface_hub_at(server, tmp_path / "hf-cache", monkeypatch)
        yield server


def test_parse_hub_spec() -> None:
    spec = parse_hub_spec("hf://o/r@v2:q4_k_m")
    assert (spec.repo_id, spec.revision, spec.filename, spec.tag) == ("o/r", "v2", None, "q4_k_m")
    spec = parse_hub_spec("hf://o/r@v2/a/b.gguf")
    assert (spec.repo_id, spec.revision, spec.filename, spec.tag) == ("o/r", "v2", "a/b.gguf", None)
    assert str(parse_hub_spec("hf://o/r")) == "hf://o/r"
    for bad in (
        "hf://owner",
        "hf://owner/repo/",
        "hf://owner/repo@/f.gguf",
        "hf://o/r:",
        "hf://o/r:Q4/f.gguf",
    ):
        with pytest.raises(ModelLoadError, match="malformed hf://"):
            parse_hub_spec(bad)


def test_by_file_name(hub: FakeHub) -> None:
    path = resolve_model_path("hf://acme/tiny-GGUF/tiny-Q4_K_M.gguf")
    assert path.name == "tiny-Q4_K_M.gguf" and "hf-cache" in str(path)
    assert path.read_bytes() == hub.repos["acme/tiny-GGUF"].files["tiny-Q4_K_M.gguf"]
    nested = resolve_model_path("hf://acme/tiny-GGUF@main/nested/dir/other-IQ4_XS.gguf")
    assert nested.as_posix().endswith("nested/dir/other-IQ4_XS.gguf")
    commit = hub.repos["acme/tiny-GGUF"].commit
    assert resolve_hub_model("acme/tiny-GGUF", "tiny.q8_0.gguf", commit).read_bytes() == b"q8" * 100


@pytest.mark.parametrize(
    ("tag", "name"),
    [("Q4_K_M", "tiny-Q4_K_M.gguf"), ("q8_0", "tiny.q8_0.gguf"), ("IQ4_XS", "other-IQ4_XS.gguf")],
)
def test_by_tag(hub: FakeHub, tag: str, name: str) -> None:
    assert resolve_model_path(f"hf://acme/tiny-GGUF:{tag}").name == name
    assert hub.downloads() == [
        path for path in hub.repos["acme/tiny-GGUF"].files if path.endswith(name)
    ]


def test_default_and_unknown_tag(hub: FakeHub) -> None:
    assert resolve_model_path("hf://acme/tiny-GGUF").name == "tiny-Q4_K_M.gguf"
    assert resolve_model_path("hf://acme/one").name == "only.gguf"
    with pytest.raises(ModelLoadError, match="no model file with quantization 'Q5_K_S'") as info:
        resolve_model_path("hf://acme/tiny-GGUF:Q5_K_S")
    assert "Q4_K_M (tiny-Q4_K_M.gguf)" in info.value.reason and "IQ4_XS" in info.value.reason


def test_split_model_is_fetched_whole(hub: FakeHub) -> None:
    first = resolve_model_path("hf://acme/split-GGUF:Q4_K_M")
    assert first.name == "big-Q4_K_M-00001-of-00003.gguf"
    assert sorted(p.name for p in first.parent.iterdir()) == [
        f"big-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
    assert (first.parent / "big-Q4_K_M-00003-of-00003.gguf").read_bytes() == bytes([3]) * 50
    # Naming a later part fetches the whole model too, and returns its first part.
    by_name = resolve_model_path("hf://acme/split-GGUF/Q4_K_M/big-Q4_K_M-00002-of-00003.gguf")
    assert by_name == first


def test_split_model_with_a_missing_part(hub: FakeHub) -> None:
    with pytest.raises(ModelLoadError, match="no such file") as info:
        resolve_model_path("hf://acme/split-GGUF:Q8_0")
    assert "big-Q8_0-00002-of-00002.gguf" in str(info.value)


def test_mmproj_auto_from_the_hub(hub: FakeHub) -> None:
    model = resolve_model_path("hf://acme/tiny-GGUF:Q4_K_M")
    projector = resolve_mmproj_path("auto", model="hf://acme/tiny-GGUF:Q4_K_M", model_path=model)
    assert projector.name == "mmproj-tiny-F16.gguf"  # F16 preferred over F32
    assert projector.parent == model.parent
    f16 = resolve_model_path("hf://acme/tiny-GGUF:F16")
    assert resolve_mmproj_path("AUTO", model="hf://acme/tiny-GGUF:F16", model_path=f16).name == (
        "mmproj-tiny-F16.gguf"
    )
    with pytest.raises(ModelLoadError, match="no mmproj"):
        resolve_mmproj_path("auto", model="hf://acme/one", model_path=model)


def test_engine_config_resolves_mmproj_auto(hub: FakeHub) -> None:
    config = EngineConfig(model="hf://acme/tiny-GGUF", mmproj="auto").resolved()
    assert config.model is not None and config.model.endswith("tiny-Q4_K_M.gguf")
    assert config.mmproj is not None and config.mmproj.endswith("mmproj-tiny-F16.gguf")


def test_mmproj_auto_beside_a_local_model(tmp_path: Path) -> None:
    model = tmp_path / "m-Q4_K_M.gguf"
    model.write_bytes(b"m")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelLoadError, match="no mmproj"):
        resolve_mmproj_path("auto", model=str(model), model_path=model)
    (tmp_path / "mmproj-m-F16.gguf").write_bytes(b"p")
    assert resolve_mmproj_path("auto", model=str(model), model_path=model) == (
        tmp_path / "mmproj-m-F16.gguf"
    )
    (tmp_path / "mmproj-m-F32.gguf").write_bytes(b"p")
    (tmp_path / "mmproj-m-BF16.gguf").write_bytes(b"p")
    assert (
        resolve_mmproj_path("auto", model=str(model), model_path=model).name == "mmproj-m-F16.gguf"
    )
    (tmp_path / "mmproj-m-F16.gguf").unlink()
    with pytest.raises(ModelLoadError, match="several projectors") as info:
        resolve_mmproj_path("auto", model=str(model), model_path=model)
    assert "mmproj-m-BF16.gguf" in info.value.reason and "mmproj-m-F32.gguf" in info.value.reason


@pytest.mark.parametrize("switch", ["environment", "huggingface_hub"])
def test_offline_reads_the_cache_only(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    online = resolve_model_path("hf://acme/tiny-GGUF:Q4_K_M")
    hub.requests.clear()
    if switch == "environment":  # set after huggingface_hub was imported
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:  # set before, as huggingface_hub read it at import
        monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    assert resolve_model_path("hf://acme/tiny-GGUF:Q4_K_M") == online
    assert resolve_model_path("hf://acme/tiny-GGUF/tiny-Q4_K_M.gguf") == online
    assert resolve_model_path("hf://acme/tiny-GGUF") == online  # only the cached model is seen
    with pytest.raises(ModelLoadError, match="not in the Hugging Face cache") as info:
        resolve_model_path("hf://acme/tiny-GGUF/tiny-F16.gguf")
    assert "HF_HUB_OFFLINE is set" in info.value.reason
    with pytest.raises(ModelLoadError, match="not in the Hugging Face cache"):
        resolve_model_path("hf://acme/one")
    with pytest.raises(ModelLoadError, match=r"projector .* is not in the Hugging Face cache"):
        resolve_mmproj_path("auto", model="hf://acme/tiny-GGUF", model_path=online)
    assert hub.requests == []


def test_download_false_reads_the_cache_only(hub: FakeHub) -> None:
    with pytest.raises(ModelLoadError, match=r"not in the Hugging Face cache .*download=False"):
        resolve_model_path("hf://acme/tiny-GGUF:Q4_K_M", download=False)
    with pytest.raises(ModelLoadError, match="not in the Hugging Face cache"):
        resolve_model_path("hf://acme/tiny-GGUF/tiny-Q4_K_M.gguf", download=False)
    assert hub.requests == []
    online = resolve_model_path("hf://acme/tiny-GGUF:Q4_K_M")
    assert resolve_model_path("hf://acme/tiny-GGUF:Q4_K_M", download=False) == online


def test_progress_callback(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hf_constants, "DOWNLOAD_CHUNK_SIZE", 64)
    calls: list[tuple[str, int, int | None]] = []
    resolve_model_path("hf://acme/split-GGUF:Q4_K_M", progress=lambda *args: calls.append(args))
    names = [f"Q4_K_M/big-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert [name for name in dict.fromkeys(c[0] for c in calls)] == names
    for name in names:
        done = [d for n, d, _ in calls if n == name]
        assert done == sorted(done) and done[0] == 0 and done[-1] == 50
        assert {t for n, _, t in calls if n == name} == {50}
    calls.clear()
    resolve_model_path("hf://acme/tiny-GGUF/tiny.q8_0.gguf", progress=lambda *a: calls.append(a))
    done = [d for _, d, _ in calls]
    assert len(done) >= 4 and done == sorted(done) and done[-1] == 200  # 64-byte chunks


def test_failed_download_raises_model_load_error(hub: FakeHub) -> None:
    hub.fail.add("tiny-F16.gguf")
    with pytest.raises(ModelLoadError, match="Hugging Face download failed") as info:
        resolve_model_path("hf://acme/tiny-GGUF:F16")
    assert info.value.__cause__ is not None
    with pytest.raises(ModelLoadError, match="RepositoryNotFoundError"):
        resolve_model_path("hf://acme/missing/x.gguf")
    with pytest.raises(ModelLoadError, match="cannot list the repository"):
        resolve_model_path("hf://acme/missing:Q4_K_M")


def test_constructors_never_download(hub: FakeHub) -> None:
    chat = ChatLlamaCpp(model="hf://acme/tiny-GGUF:Q4_K_M", n_ctx_per_seq=512)
    assert hub.requests == []
    assert cached_model_info("hf://acme/tiny-GGUF:Q4_K_M") is None
    partial = chat.profile
    assert partial is not None and partial["tool_calling"] and "max_input_tokens" not in partial
    resolve_model_path("hf://acme/tiny-GGUF:Q4_K_M")
    hub.requests.clear()
    full = ChatLlamaCpp(model="hf://acme/tiny-GGUF:Q4_K_M", n_ctx_per_seq=512).profile
    # The name is the file's (client.model_display_name), not the header's "Tiny".
    assert full is not None and full["name"] == "tiny-Q4_K_M" and full["max_input_tokens"] == 512
    assert "image_inputs" in full and full["image_inputs"] is False
    assert hub.requests == []


def test_profile_without_a_readable_header_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "missing.gguf"
    assert ChatLlamaCpp(model=str(missing)).profile is None
    assert "has no profile" in caplog.text and "file not found" in caplog.text


def test_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # makes the import fail
    with pytest.raises(MissingDependencyError, match=r"llamacpp-integrations\[hub\]"):
        resolve_model_path("hf://owner/repo/model.gguf")
