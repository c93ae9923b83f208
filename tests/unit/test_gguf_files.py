"""Choosing GGUF files by name: quantization tags, split parts, projectors (no I/O)."""

from __future__ import annotations

import pytest

from llamacpp_integrations.errors import ModelLoadError
from llamacpp_integrations.models.gguf_files import (
    choose_mmproj,
    choose_model_file,
    is_mmproj,
    quant_tag,
    split_name,
)

REPO = [
    "README.md",
    "Model-Q4_K_M.gguf",
    "model.q8_0.gguf",
    "Model-IQ4_XS.gguf",
    "Model-UD-Q4_K_XL.gguf",
    "Model-F16.gguf",
    "mmproj-Model-F16.gguf",
    "Q6_K/Model-Q6_K-00001-of-00002.gguf",
    "Q6_K/Model-Q6_K-00002-of-00002.gguf",
]


@pytest.mark.parametrize(
    ("path", "tag"),
    [
        ("Model-Q4_K_M.gguf", "Q4_K_M"),
        ("model.q8_0.gguf", "Q8_0"),
        ("Model-UD-Q4_K_XL.gguf", "Q4_K_XL"),
        ("Model-IQ4_XS.gguf", "IQ4_XS"),
        ("mmproj-model-bf16.gguf", "BF16"),
        ("Q6_K/Model-Q6_K-00001-of-00002.gguf", "Q6_K"),
        ("gemma-3-270m.gguf", None),
    ],
)
def test_quant_tag(path: str, tag: str | None) -> None:
    assert quant_tag(path) == tag


@pytest.mark.parametrize(
    ("tag", "chosen"),
    [
        ("Q4_K_M", "Model-Q4_K_M.gguf"),
        ("q4_k_m", "Model-Q4_K_M.gguf"),  # case-insensitive
        ("Q8_0", "model.q8_0.gguf"),
        ("iq4_xs", "Model-IQ4_XS.gguf"),
        ("F16", "Model-F16.gguf"),  # the projector is never the model
        ("Q6_K", "Q6_K/Model-Q6_K-00001-of-00002.gguf"),  # a split is named by its first part
        (None, "Model-Q4_K_M.gguf"),  # the default
    ],
)
def test_choose_model_file(tag: str | None, chosen: str) -> None:
    assert choose_model_file(REPO, tag, label="x") == chosen


def test_unknown_tag_lists_the_available_ones() -> None:
    with pytest.raises(ModelLoadError, match="no model file with quantization 'Q5_K_S'") as info:
        choose_model_file(REPO, "Q5_K_S", label="hf://o/r:Q5_K_S")
    for listed in ("Q4_K_M (Model-Q4_K_M.gguf)", "Q8_0", "IQ4_XS", "Q4_K_XL", "F16", "Q6_K"):
        assert listed in info.value.reason
    assert "mmproj" not in info.value.reason


def test_a_tag_is_a_whole_token() -> None:
    # Q4_K is neither Q4_K_M nor Q4_K_XL.
    with pytest.raises(ModelLoadError, match="no model file"):
        choose_model_file(REPO, "Q4_K", label="x")


def test_ambiguous_tag_lists_the_matches() -> None:
    files = ["a/Model-Q4_K_M.gguf", "b/Model-Q4_K_M.gguf"]
    with pytest.raises(ModelLoadError, match="matches 2 models") as info:
        choose_model_file(files, "Q4_K_M", label="x")
    assert "a/Model-Q4_K_M.gguf" in info.value.reason and "b/Model" in info.value.reason


def test_default_without_q4_k_m() -> None:
    assert choose_model_file(["only.gguf", "mmproj-f16.gguf"], None, label="x") == "only.gguf"
    with pytest.raises(ModelLoadError, match="none is the default Q4_K_M") as info:
        choose_model_file(["m-Q8_0.gguf", "m-F16.gguf"], None, label="x")
    assert "Q8_0 (m-Q8_0.gguf)" in info.value.reason
    with pytest.raises(ModelLoadError, match=r"no \.gguf model"):
        choose_model_file(["README.md", "mmproj-f16.gguf"], None, label="x")


def test_split_name() -> None:
    split = split_name("dir/Model-00002-of-00003.gguf")
    assert split is not None and (split.index, split.count) == (2, 3)
    assert split.parts == [f"dir/Model-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert split_name("Model-Q4_K_M.gguf") is None
    assert split_name("Model-00004-of-00003.gguf") is None


def test_choose_mmproj() -> None:
    assert is_mmproj("sub/MMPROJ-x.gguf") and not is_mmproj("model-mmproj.gguf")
    several = ["m-Q8_0.gguf", "mmproj-F32.gguf", "mmproj-F16.gguf", "mmproj-Q8_0.gguf"]
    assert choose_mmproj(several, "m-Q8_0.gguf", label="x") == "mmproj-Q8_0.gguf"  # same precision
    assert choose_mmproj(several, "m-Q4_K_M.gguf", label="x") == "mmproj-F16.gguf"  # else F16
    assert choose_mmproj(["mmproj-BF16.gguf"], "m.gguf", label="x") == "mmproj-BF16.gguf"
    with pytest.raises(ModelLoadError, match="several projectors") as info:
        choose_mmproj(["mmproj-F32.gguf", "mmproj-BF16.gguf"], "m-Q4_K_M.gguf", label="x")
    assert "mmproj-F32.gguf, mmproj-BF16.gguf" in info.value.reason or "BF16" in info.value.reason
    with pytest.raises(ModelLoadError, match="no mmproj"):
        choose_mmproj(["m.gguf"], "m.gguf", label="x")
