"""An Ollama manifest's chat template, for a GGUF that has none of its own.

Ollama keeps a model's chat format as a Go template (the manifest's ``template`` layer), which
this package does not run: it renders chats with Jinja, as llama.cpp does, from the GGUF's
``tokenizer.chat_template``. Nearly every GGUF in Ollama's store carries that one too, and it
is used. A GGUF without one (an old conversion, a file imported with ``ollama create``) would
leave chat without a template; for it, the Go template's turn markers say which common chat
format it writes, and the Jinja template of that format (written here) stands in:

* ChatML (``<|im_start|>role ... <|im_end|>``: Qwen, SmolLM, Hermes...);
* Llama 3 (``<|start_header_id|>role<|end_header_id|> ... <|eot_id|>``);
* Gemma (``<start_of_turn>user|model ... <end_of_turn>``; no system role: a system message is
  a user turn).

A Go template of any other format gives ``None``: pass ``chat_template=`` then.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["CHATML", "GEMMA", "LLAMA3", "jinja_for_go_template"]

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{ message['content'] | trim }}{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
GEMMA = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "{{ '<start_of_turn>' + role + '\\n' }}{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


class _Format(NamedTuple):
    markers: tuple[str, ...]
    jinja: str


# Every marker of a format must be in the Go template for it to be taken as that format.
_FORMATS = (
    _Format(("<|im_start|>", "<|im_end|>"), CHATML),
    _Format(("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"), LLAMA3),
    _Format(("<start_of_turn>", "<end_of_turn>"), GEMMA),
)


def jinja_for_go_template(go_template: str | None) -> str | None:
    """The Jinja template of the chat format ``go_template`` writes (``None``: not one of the
    formats above, or no template)."""
    if not go_template:
        return None
    for known in _FORMATS:
        if all(marker in go_template for marker in known.markers):
            return known.jinja
    return None
