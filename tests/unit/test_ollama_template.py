"""An Ollama manifest's Go template stands in for a GGUF that has no chat template: its turn
markers name the chat format (ChatML, Llama 3, Gemma), whose Jinja template renders chats the
way the Go one does. A GGUF with a template of its own keeps it. Stores are laid out in a
temporary folder as Ollama lays them out."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from llamacpp_integrations.client import engine_settings_of
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.models.stores import store_defaults
from llamacpp_integrations.models.stores.ollama_template import (
    CHATML,
    GEMMA,
    LLAMA3,
    jinja_for_go_template,
)
from llamacpp_integrations.prompts.chat_template import ChatTemplate
from tests.builders.model_stores import ollama_store
from tests.unit.test_model_stores import stores  # noqa: F401  (the fixture)
from tests.unit.test_models import build_gguf, standard_kvs, standard_tensors

# Go templates as Ollama's library writes these formats (legacy single-turn and Messages forms).
GO_CHATML = (
    "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
    "{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}"
    "<|im_start|>assistant\n{{ .Response }}<|im_end|>\n"
)
GO_LLAMA3 = (
    "{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n"
    "{{ .Content }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n"
)
GO_GEMMA = (
    '{{- range .Messages }}<start_of_turn>{{ if eq .Role "user" }}user{{ else }}model{{ end }}\n'
    "{{ .Content }}<end_of_turn>\n{{ end }}<start_of_turn>model\n"
)
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Bye"},
]


def render(template: str) -> str:
    return ChatTemplate(template, bos_token="<s>", eos_token="</s>").render_exact(CHAT)


def test_the_format_is_read_from_the_go_templates_markers() -> None:
    assert jinja_for_go_template(GO_CHATML) == CHATML
    assert jinja_for_go_template(GO_LLAMA3) == LLAMA3
    assert jinja_for_go_template(GO_GEMMA) == GEMMA
    assert jinja_for_go_template("[INST] {{ .Prompt }} [/INST]") is None  # not one of them
    assert jinja_for_go_template(None) is None and jinja_for_go_template("") is None


def test_the_stand_ins_render_each_format() -> None:
    assert render(CHATML) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render(LLAMA3) == (
        "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert render(GEMMA) == (
        "<s><start_of_turn>user\nBe brief.<end_of_turn>\n<start_of_turn>user\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def _untemplated_store(root: Path, go_template: str) -> str:
    """A store holding a GGUF without a chat template, under ``ollama://bare:latest``."""
    kvs = [kv for kv in standard_kvs() if b"tokenizer.chat_template" not in kv]
    layers = []
    for media, data in (
        ("model", build_gguf(kvs, standard_tensors())),
        ("template", go_template.encode()),
    ):
        digest = hashlib.sha256(data).hexdigest()
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        (root / "blobs" / f"sha256-{digest}").write_bytes(data)
        layers.append(
            {
                "mediaType": f"application/vnd.ollama.image.{media}",
                "digest": f"sha256:{digest}",
                "size": len(data),
            }
        )
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / "bare" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}), encoding="utf-8")
    return "ollama://bare"


def test_a_gguf_without_a_template_takes_the_manifests_format(
    stores: Path,  # noqa: F811
) -> None:
    spec = _untemplated_store(stores / "ollama", GO_CHATML)
    assert store_defaults(spec).engine["chat_template"] == CHATML
    # The adapters' engine gets it; a call's own chat_template= still replaces it per request.
    assert engine_settings_of(ChatLlamaCpp(model=spec))["chat_template"] == CHATML


def test_an_unknown_format_gives_no_template(stores: Path) -> None:  # noqa: F811
    spec = _untemplated_store(stores / "ollama", "[INST] {{ .Prompt }} [/INST]")
    assert "chat_template" not in store_defaults(spec).engine


def test_a_gguf_with_a_template_keeps_it(
    stores: Path,  # noqa: F811
    smollm_path: Path,
) -> None:
    ollama_store(stores / "ollama", smollm_path, template=GO_CHATML)
    assert "chat_template" not in store_defaults("ollama://smollm2:135m").engine


@pytest.mark.parametrize("template", [CHATML, LLAMA3, GEMMA])
def test_stand_ins_compile(template: str) -> None:
    assert ChatTemplate(template, bos_token="<s>", eos_token="</s>").reads >= {"messages"}
