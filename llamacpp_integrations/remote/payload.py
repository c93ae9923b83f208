"""Requests as llama-server's native ``/completion`` bodies (pure: no I/O).

The prompt is ours: chats are rendered locally with the model's template (so tool-support and
reasoning detection see the same text the local engine would), and sent as text or token ids.
Everything that shapes the output is ours too: the GBNF ``grammar`` our tool and schema code
built, lazy grammars as ``grammar_lazy`` with one trigger per pattern, stop strings, sampling.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from ..engine.types import GenerationRequest, SamplingParams
from ..prompts.media import AudioInput, ImageInput, MediaInput

__all__ = [
    "TRIGGER_PATTERN",
    "completion_body",
    "encode_image",
    "grammar_fields",
    "sampling_fields",
]

# ``common_grammar_trigger_type`` in llama.cpp's common/common.h: TOKEN=0, WORD=1, PATTERN=2,
# PATTERN_FULL=3. The server reads ``grammar_triggers`` as ``[{"type": int, "value": str}]``
# (tools/server/server-common.h, ``server_grammar_trigger``). A PATTERN is handed to the lazy
# grammar sampler as written, which is exactly what the local engine does with our patterns
# (``llama_sampler_init_grammar_lazy_patterns``), so ``^...$`` keeps its meaning.
TRIGGER_PATTERN = 2


def sampling_fields(sampling: SamplingParams) -> dict[str, Any]:
    """The sampler settings under the server's names."""
    fields: dict[str, Any] = {
        "temperature": max(sampling.temperature, 0.0),
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "repeat_penalty": sampling.repeat_penalty,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "repeat_last_n": sampling.penalty_last_n,
    }
    if sampling.logit_bias:
        # JSON has no -inf: the server reads ``false`` as "never this token".
        fields["logit_bias"] = [
            [token, bias if bias != float("-inf") else False]
            for token, bias in sampling.logit_bias.items()
        ]
    if sampling.seed is not None:
        fields["seed"] = sampling.seed
    return fields


def grammar_fields(grammar: str | None, triggers: Sequence[str]) -> dict[str, Any]:
    """``grammar``, and for a lazy grammar ``grammar_lazy`` with its trigger patterns."""
    if grammar is None:
        return {}
    if not triggers:
        return {"grammar": grammar}
    return {
        "grammar": grammar,
        "grammar_lazy": True,
        "grammar_triggers": [{"type": TRIGGER_PATTERN, "value": p} for p in triggers],
    }


def encode_image(image: ImageInput) -> str:
    """An image as base64 of a binary PPM: lossless, no encoder needed, and read by the
    server's image loader (stb_image) like any other format."""
    header = f"P6\n{image.width} {image.height}\n255\n".encode("ascii")
    return base64.b64encode(header + image.rgb).decode("ascii")


def encode_media(item: MediaInput) -> str:
    """An image as ``encode_image`` makes it; a clip as its checked WAV, FLAC or MP3 bytes in
    base64 (the server decodes and resamples it with the same libmtmd helper)."""
    if isinstance(item, AudioInput):
        return base64.b64encode(item.data).decode("ascii")
    return encode_image(item)


def completion_body(
    request: GenerationRequest,
    prompt: str | list[int],
    images: Sequence[MediaInput] = (),
) -> dict[str, Any]:
    """The ``/completion`` body for ``request`` with its prompt already made."""
    body: dict[str, Any] = {
        "prompt": prompt
        if not images
        else {"prompt_string": prompt, "multimodal_data": [encode_media(i) for i in images]},
        "stream": True,
        "cache_prompt": True,
        "n_predict": request.max_tokens if request.max_tokens is not None else -1,
        "return_tokens": True,
        **sampling_fields(request.sampling),
        **grammar_fields(request.grammar, request.grammar_triggers),
    }
    if request.stop:
        body["stop"] = list(request.stop)
    if request.ignore_eos:
        body["ignore_eos"] = True
    if request.logprobs is not None:
        # The server reports the sampled token's log-probability beside the top n; it needs
        # n >= 1 to report anything, so logprobs=0 asks for one and drops it.
        body["n_probs"] = max(request.logprobs, 1)
        body["post_sampling_probs"] = False
    return body
