"""Models other programs keep, used in place: Ollama's store (``ollama://``), LM Studio's folder
(``lmstudio://``), llama.cpp's ``LLAMA_CACHE`` (``hf://`` found there first), and the ``list``
command over all of them. Each store is laid out in a temporary folder as its program lays it
out (tests/builders/model_stores.py), holding the real test model's file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llamacpp_integrations.cli import main
from llamacpp_integrations.client import defaults_of, engine_settings_of, model_display_name
from llamacpp_integrations.errors import ModelLoadError
from llamacpp_integrations.models import read_gguf_info, resolve_mmproj_path, resolve_model_path
from llamacpp_integrations.models import resolve as resolve_module
from llamacpp_integrations.models.catalog import find_models
from llamacpp_integrations.models.stores import store_defaults, store_display_name
from llamacpp_integrations.models.stores.ollama import parse_ollama_spec
from tests.builders.model_stores import (
    COMMIT,
    SMOLLM_SHA256,
    hub_repo,
    lmstudio_repo,
    ollama_store,
    place,
)

PARAMS = {
    "stop": ["<|im_start|>", "<|im_end|>"],
    "temperature": 0.2,
    "top_k": 20,
    "repeat_last_n": 32,
    "num_predict": 64,
    "num_ctx": 2048,
    "mirostat": 0,
}


@pytest.fixture
def stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every store's variable pointed into ``tmp_path`` (empty stores), and HOME too, so that
    nothing of this machine's own stores is read."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name, folder in {
        "OLLAMA_MODELS": "ollama",
        "LMSTUDIO_MODELS": "lmstudio",
        "LLAMA_CACHE": "llama.cpp",
        "HF_HUB_CACHE": "hf",
        "LLAMACPP_INTEGRATIONS_MODELS": "models",
    }.items():
        monkeypatch.setenv(name, str(tmp_path / folder))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    # huggingface_hub read its variables when imported: its cache is set where it looks now.
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


# ---- Ollama ------------------------------------------------------------------------------------


def test_ollama_model_is_its_blob_in_place(stores: Path, smollm_path: Path) -> None:
    blob = ollama_store(stores / "ollama", smollm_path, params=PARAMS)
    path = resolve_model_path("ollama://smollm2:135m")
    assert path == blob and path.name == f"sha256-{SMOLLM_SHA256}"
    assert os.path.samefile(path, smollm_path)  # the same file: nothing copied
    assert read_gguf_info(path).architecture == "llama"  # no .gguf suffix needed
    # Every way of naming it in Ollama's grammar names the same manifest.
    for spec in (
        "ollama://library/smollm2:135m",
        "ollama://registry.ollama.ai/library/smollm2:135m",
    ):
        assert resolve_model_path(spec) == blob


def test_ollama_default_tag_namespaces_and_hugging_face_names(
    stores: Path, smollm_path: Path
) -> None:
    root = stores / "ollama"
    ollama_store(root, smollm_path, "registry.ollama.ai/library/smollm2/latest")
    ollama_store(root, smollm_path, "registry.ollama.ai/someone/tiny/q4")
    ollama_store(root, smollm_path, "hf.co/HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/Q4_1")
    for spec in (
        "ollama://smollm2",
        "ollama://someone/tiny:q4",
        "ollama://hf.co/HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1",
        "ollama://SmolLM2:latest",  # Ollama's names ignore case
    ):
        assert os.path.samefile(resolve_model_path(spec), smollm_path), spec


def test_ollama_blobs_named_the_old_way(stores: Path, smollm_path: Path) -> None:
    blob = ollama_store(stores / "ollama", smollm_path, old_blob_names=True)
    assert resolve_model_path("ollama://smollm2:135m") == blob


def test_ollama_unknown_tag_or_model_lists_what_the_store_has(
    stores: Path, smollm_path: Path
) -> None:
    ollama_store(stores / "ollama", smollm_path)
    with pytest.raises(ModelLoadError, match=r"tags of this model: ollama://smollm2:135m"):
        resolve_model_path("ollama://smollm2:1.7b")
    with pytest.raises(ModelLoadError, match=r"ollama pull`\); models: ollama://smollm2:135m"):
        resolve_model_path("ollama://qwen3")
    for bad in ("ollama://", "ollama://a/b/c/d", "ollama://../x", "ollama://x:"):
        with pytest.raises(ModelLoadError, match="malformed ollama:// spec"):
            parse_ollama_spec(bad)


def test_ollama_manifest_naming_a_missing_blob(stores: Path, smollm_path: Path) -> None:
    root = stores / "ollama"
    ollama_store(root, smollm_path)
    (root / "blobs" / f"sha256-{SMOLLM_SHA256}").unlink()
    with pytest.raises(ModelLoadError, match="is not in"):
        resolve_model_path("ollama://smollm2:135m")


def test_ollama_params_become_defaults(stores: Path, smollm_path: Path) -> None:
    ollama_store(stores / "ollama", smollm_path, params=PARAMS, projector=b"projector")
    defaults = store_defaults("ollama://smollm2:135m")
    assert defaults.sampling == {
        "stop": ["<|im_start|>", "<|im_end|>"],
        "temperature": 0.2,
        "top_k": 20,
        "penalty_last_n": 32,
        "max_tokens": 64,
    }
    assert defaults.engine["n_ctx_per_seq"] == 2048
    assert Path(defaults.engine["mmproj"]).read_bytes() == b"projector"
    assert store_defaults("smollm2-135m") == store_defaults("ollama://not-there")  # both empty


def test_ollama_projector_is_the_auto_mmproj(stores: Path, smollm_path: Path) -> None:
    root = stores / "ollama"
    ollama_store(root, smollm_path, "registry.ollama.ai/library/vision/latest", projector=b"p")
    ollama_store(root, smollm_path, "registry.ollama.ai/library/text/latest")
    model = resolve_model_path("ollama://vision")
    projector = resolve_mmproj_path("auto", model="ollama://vision", model_path=model)
    assert projector.parent == model.parent and projector.read_bytes() == b"p"
    with pytest.raises(ModelLoadError, match="no projector layer"):
        resolve_mmproj_path("auto", model="ollama://text", model_path=model)


def test_ollama_models_are_named_by_name_and_tag(stores: Path, smollm_path: Path) -> None:
    blob = ollama_store(stores / "ollama", smollm_path)
    assert store_display_name(blob) == "smollm2:135m"
    assert model_display_name(blob) == "smollm2:135m"
    assert model_display_name(smollm_path) == "SmolLM2-135M-Instruct.Q4_1"


def test_adapters_take_the_store_defaults_the_user_did_not_set(
    stores: Path, smollm_path: Path
) -> None:
    from llamacpp_integrations.langchain import ChatLlamaCpp

    ollama_store(stores / "ollama", smollm_path, params=PARAMS, projector=b"p")
    plain = ChatLlamaCpp(model="ollama://smollm2:135m")
    assert defaults_of(plain)["stop"] == ["<|im_start|>", "<|im_end|>"]
    assert defaults_of(plain)["temperature"] == 0.2
    settings = engine_settings_of(plain)
    assert settings["n_ctx_per_seq"] == 2048 and settings["mmproj"].endswith(
        "sha256-" + __import__("hashlib").sha256(b"p").hexdigest()
    )
    mine = ChatLlamaCpp(
        model="ollama://smollm2:135m", temperature=0.7, stop_sequences=None, mmproj=None
    )
    assert defaults_of(mine)["temperature"] == 0.7 and defaults_of(mine)["stop"] is None
    assert "mmproj" not in engine_settings_of(mine)  # mmproj=None: no projector, as asked
    assert defaults_of(ChatLlamaCpp(model="smollm2-135m"))["temperature"] != 0.2


# ---- LM Studio ---------------------------------------------------------------------------------


def test_lmstudio_file_in_place(stores: Path, smollm_path: Path) -> None:
    root = stores / "lmstudio"
    folder = lmstudio_repo(
        root,
        "lmstudio-community",
        "SmolLM2-GGUF",
        {smollm_path.name: smollm_path, "mmproj-F16.gguf": b"p"},
    )
    path = resolve_model_path("lmstudio://lmstudio-community/SmolLM2-GGUF")
    assert path == folder / smollm_path.name and os.path.samefile(path, smollm_path)
    assert (
        resolve_model_path(f"lmstudio://lmstudio-community/SmolLM2-GGUF/{smollm_path.name}") == path
    )
    assert resolve_model_path("lmstudio://lmstudio-community/SmolLM2-GGUF:q4_1") == path
    projector = resolve_mmproj_path(
        "auto", model="lmstudio://lmstudio-community/SmolLM2-GGUF", model_path=path
    )
    assert projector == folder / "mmproj-F16.gguf"


def test_lmstudio_several_files_and_unknown_names(stores: Path, smollm_path: Path) -> None:
    root = stores / "lmstudio"
    lmstudio_repo(root, "pub", "repo", {"m-Q4_1.gguf": smollm_path, "m-Q8_0.gguf": smollm_path})
    with pytest.raises(ModelLoadError, match=r"Available: Q4_1 \(m-Q4_1.gguf\), Q8_0"):
        resolve_model_path("lmstudio://pub/repo")
    assert resolve_model_path("lmstudio://pub/repo:Q8_0").name == "m-Q8_0.gguf"
    with pytest.raises(ModelLoadError, match=r"it has: lmstudio://pub/repo"):
        resolve_model_path("lmstudio://pub/other")
    with pytest.raises(ModelLoadError, match=r"it has: m-Q4_1.gguf, m-Q8_0.gguf"):
        resolve_model_path("lmstudio://pub/repo/m-F16.gguf")
    with pytest.raises(ModelLoadError, match="malformed lmstudio:// spec"):
        resolve_model_path("lmstudio://pub/../../etc")


def test_lmstudio_older_folder(
    stores: Path, smollm_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LMSTUDIO_MODELS")
    lmstudio_repo(stores / "home/.cache/lm-studio/models", "pub", "repo", {"m.gguf": smollm_path})
    assert resolve_model_path("lmstudio://pub/repo").parts[-5:] == (
        "lm-studio",
        "models",
        "pub",
        "repo",
        "m.gguf",
    )


# ---- llama.cpp's LLAMA_CACHE -------------------------------------------------------------------


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hub (and the Hugging Face cache) out of reach: what is found is llama.cpp's."""

    def refuse(*args: object, **kwargs: object) -> Path:
        raise AssertionError("asked the Hugging Face hub")

    monkeypatch.setattr(resolve_module, "resolve_hub_spec", refuse)


def test_hf_spec_found_in_llama_cache_hub_layout(
    stores: Path, smollm_path: Path, no_hub: None
) -> None:
    snapshot = hub_repo(
        stores / "llama.cpp",
        "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
        {"smollm2-135m-instruct-q4_1.gguf": smollm_path, "mmproj-smollm2-f16.gguf": b"p"},
    )
    wanted = snapshot / "smollm2-135m-instruct-q4_1.gguf"
    repo = "hf://HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
    for spec in (
        repo,
        f"{repo}:Q4_1",
        f"{repo}/smollm2-135m-instruct-q4_1.gguf",
        f"{repo}@main:q4_1",
    ):
        assert resolve_model_path(spec) == wanted, spec
    assert os.path.samefile(wanted, smollm_path)
    projector = resolve_mmproj_path("auto", model=f"{repo}:Q4_1", model_path=wanted)
    assert projector == snapshot / "mmproj-smollm2-f16.gguf"
    assert f"snapshots/{COMMIT}" in str(wanted)


def test_hf_spec_found_in_llama_cache_flat_files(
    stores: Path, smollm_path: Path, no_hub: None
) -> None:
    cache = stores / "llama.cpp"
    flat = place(smollm_path, cache / "HuggingFaceTB_SmolLM2-135M-Instruct-GGUF_smollm2-Q4_1.gguf")
    (cache / (flat.name + ".etag")).write_text('"abc"')
    assert (
        resolve_model_path("hf://HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2-Q4_1.gguf")
        == flat
    )
    assert resolve_model_path("hf://HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1") == flat


def test_hf_spec_not_in_llama_cache_asks_the_hub(stores: Path, no_hub: None) -> None:
    with pytest.raises(AssertionError, match="asked the Hugging Face hub"):
        resolve_model_path("hf://owner/repo:Q4_K_M")


# ---- list --------------------------------------------------------------------------------------


def _fill_every_store(root: Path, model: Path) -> None:
    place(model, root / "models" / model.name)
    hub_repo(root / "hf", "owner/from-hf", {"sub/m-Q4_1.gguf": model})
    hub_repo(
        root / "llama.cpp", "owner/from-llama", {"m-Q4_1.gguf": model, "mmproj-F16.gguf": b"p"}
    )
    place(model, root / "llama.cpp" / "owner_flat_m-Q4_1.gguf")
    ollama_store(root / "ollama", model, params=PARAMS)
    lmstudio_repo(root / "lmstudio", "pub", "repo", {"m-Q4_1.gguf": model})
    (root / "lmstudio" / "pub" / "repo" / "broken.gguf").write_bytes(b"GGUF not really")


EXPECTED = {
    ("models", "smollm2-135m"),
    ("huggingface", "hf://owner/from-hf/sub/m-Q4_1.gguf"),
    ("llama.cpp", "hf://owner/from-llama/m-Q4_1.gguf"),
    ("ollama", "ollama://smollm2:135m"),
    ("lmstudio", "lmstudio://pub/repo/m-Q4_1.gguf"),
}


def test_list_finds_every_store_and_each_spec_loads_its_file(
    stores: Path, smollm_path: Path
) -> None:
    _fill_every_store(stores, smollm_path)
    entries = find_models()
    header = read_gguf_info(smollm_path)
    good = [e for e in entries if e.error is None]
    flat = str(stores / "llama.cpp" / "owner_flat_m-Q4_1.gguf")
    assert {(e.source, e.spec) for e in good} == EXPECTED | {("llama.cpp", flat)}
    for entry in good:
        assert entry.quantization == "Q4_1" and entry.context_length == header.context_length
        assert entry.size_bytes == smollm_path.stat().st_size and "chat" in entry.capabilities
        assert os.path.samefile(resolve_model_path(entry.spec), smollm_path), entry.spec
    vision = {e.spec for e in good if "vision" in e.capabilities}
    assert vision == {"hf://owner/from-llama/m-Q4_1.gguf"}
    (broken,) = [e for e in entries if e.error is not None]
    assert broken.spec == "lmstudio://pub/repo/broken.gguf" and "GGUF" in str(broken.error)


def test_list_command_text_and_json(
    stores: Path, smollm_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list"]) == 0
    assert "no models found" in capsys.readouterr().out
    _fill_every_store(stores, smollm_path)
    assert main(["list"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split() == ["SOURCE", "SPEC", "SIZE", "QUANT", "CONTEXT", "CAPABILITIES"]
    row = next(line for line in text if "ollama://smollm2:135m" in line)
    assert row.split()[:5] == ["ollama", "ollama://smollm2:135m", "94", "MiB", "Q4_1"]
    assert main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {(e["source"], e["spec"]) for e in listed if e["error"] is None} >= EXPECTED
    assert {"path", "size_bytes", "quantization", "context_length", "capabilities"} <= set(
        listed[0]
    )
