"""``ChatLlamaCpp``'s LangChain model profile: what it accepts and how big its window is.

LangChain resolves the profile in the model's constructor, which must stay cheap: nothing is
loaded, downloaded or asked of a server. The GGUF header is read only when the file is already
on disk (local, or in the Hugging Face cache); without it the profile says what the settings
tell. The window is what one request of the engine these settings make would get, not the
training context (``client.estimated_window``, which LlamaIndex's metadata uses too).

Where the engine put the model (``doctor``'s machine facts: backend, layers offloaded, the KV
cache's place and size, flash attention) has no key in LangChain's ``ModelProfile``, and
langchain-core warns on keys it does not declare: ``ChatLlamaCpp.placement`` reports them
(``placement_facts``, the same translation as LlamaIndex's ``metadata.placement``), from the
loaded engine's ``ModelInfo.placement``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from langchain_core.language_models.model_profile import ModelProfile

from ..client import ModelWindow, estimated_window
from ..client.model_facts import PlacementFacts, audio_inputs, image_inputs, placement_facts
from ..engine import InferenceEngine
from ..errors import LlamaCppIntegrationError
from ..models import GGUFInfo, cached_model_info
from ..multimodal import ImagePolicy
from ..prompts.chat_rendering import ChatTemplates
from ..tools import detect_reasoning

__all__ = ["PlacementFacts", "ProfiledChat", "model_profile", "placement_facts"]

logger = logging.getLogger(__name__)


class ProfiledChat(Protocol):
    """What a profile is made from: ``ChatLlamaCpp``'s fields."""

    @property
    def engine(self) -> InferenceEngine | None: ...
    @property
    def base_url(self) -> str | list[str] | None: ...
    @property
    def model(self) -> str | None: ...
    @property
    def mmproj(self) -> str | None: ...
    @property
    def image_policy(self) -> ImagePolicy: ...
    @property
    def chat_template(self) -> str | None: ...

    def _engine_settings(self) -> dict[str, Any]: ...


def _shows_reasoning(template: str) -> bool:
    """Whether a chat template has a reasoning format (a template that fails to render
    shows none)."""
    try:
        return detect_reasoning(ChatTemplates(template)) is not None
    except LlamaCppIntegrationError:
        return False


def model_profile(chat: ProfiledChat) -> ModelProfile | None:
    """The profile of ``chat`` (``None`` when its model cannot be read: LangChain swallows
    errors raised here, so they are logged; the same error is raised again on first use)."""
    if chat.engine is not None:
        # Its info says all a profile needs, and its file may be on another machine (a
        # remote server's, a replayed cassette's): the header is not read.
        return _profile_of(chat, None)
    if chat.base_url is not None:
        return _profile_of(chat, None)  # a server: nothing is asked of it before first use
    try:
        info = cached_model_info(chat.model)
    except LlamaCppIntegrationError as exc:
        logger.warning("ChatLlamaCpp(model=%r) has no profile: %s", chat.model, exc)
        return None
    if info is None:
        logger.info(
            "%s is not fetched yet: its profile leaves out what its header says", chat.model
        )
    return _profile_of(chat, info)


def _images(chat: ProfiledChat, info: GGUFInfo | None) -> bool | None:
    """Whether requests may carry images (``None``: not known before the first use). The
    projector setting is the engine settings': an ``ollama://`` vision model's manifest names
    its projector, which counts as set."""
    if chat.engine is None and chat.base_url is not None:
        return None  # the server's /props tells, on first use
    mmproj = None if chat.engine is not None else chat._engine_settings().get("mmproj")
    path = None if info is None else Path(info.path)
    return image_inputs(chat.engine, mmproj, model=chat.model, model_path=path)


def _profile_of(chat: ProfiledChat, info: GGUFInfo | None) -> ModelProfile:
    """The profile: everything when the header is known, else what the settings tell."""
    profile = ModelProfile(
        text_inputs=True,
        pdf_inputs=False,
        audio_inputs=False,
        video_inputs=False,
        text_outputs=True,
        tool_calling=True,
        tool_choice=True,
        tool_call_streaming=True,
        structured_output=True,
        temperature=True,
    )
    images = _images(chat, info)
    if images is not None:
        profile["image_inputs"] = images
        profile["image_url_inputs"] = images and chat.image_policy.allow_remote
    if chat.engine is not None or chat.base_url is None:
        mmproj = None if chat.engine is not None else chat._engine_settings().get("mmproj")
        audio = audio_inputs(chat.engine, mmproj)
        if audio is not None:
            profile["audio_inputs"] = audio
    if chat.chat_template is not None:
        profile["reasoning_output"] = _shows_reasoning(chat.chat_template)
    # What one request gets from the engine these settings make, not the training context.
    # (Not through chat.binding: made here, in the constructor, it would fix the engine
    # settings before the first call.)
    if chat.engine is not None:
        window = ModelWindow.of(chat.engine.info)
        template = chat.chat_template or chat.engine.info.chat_template
    elif info is not None:
        window = estimated_window(chat._engine_settings(), info)
        template = chat.chat_template or info.chat_template
    else:
        return profile
    profile["name"] = window.name
    profile["max_input_tokens"] = profile["max_output_tokens"] = window.n_ctx_per_seq
    profile["reasoning_output"] = template is not None and _shows_reasoning(template)
    return profile
