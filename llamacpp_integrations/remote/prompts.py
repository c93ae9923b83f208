"""Requests made into the prompt a llama-server takes, on this side of the wire.

Chats are rendered with the model's own template (from ``/props``) or a request's
``chat_template``, through the same ``ChatTemplates`` the local engine uses, so a chat reads the
same locally and remotely. Images are checked against the server's projector and media marker
before anything is sent.
"""

from __future__ import annotations

from ..engine.interface import PromptRequest
from ..engine.types import ChatRequest, GenerationRequest
from ..errors import AudioInputNotSupportedError, ImageInputNotSupportedError, InvalidRequestError
from ..prompts.chat_rendering import ChatTemplates
from ..prompts.media import (
    AudioInput,
    ImageInput,
    MediaInput,
    images_in,
    messages_have_audio,
    messages_have_images,
    require_image,
)
from .server_info import ServerDescription
from .transport import Transport

__all__ = ["RemotePrompts", "check_markers"]


class RemotePrompts:
    """The prompts of one server's requests (``learn`` it first, once)."""

    def __init__(self, base_url: str, transport: Transport) -> None:
        self._base_url = base_url
        self._transport = transport
        self._templates = ChatTemplates(None, owner=f"the model at {base_url}")
        self._adds_bos = False

    def learn(self, desc: ServerDescription) -> None:
        """Read the model's template and whether its vocabulary adds BOS."""
        # Whether the vocabulary adds BOS: then a template's printed BOS is dropped, as the
        # local engine does, so the prompt does not start with two.
        self._adds_bos = bool(self._transport.tokenize("", add_special=True, parse_special=False))
        self._templates = ChatTemplates(
            desc.info.chat_template or None,
            bos_token=desc.bos_token,
            eos_token=desc.eos_token,
            adds_bos=self._adds_bos,
            owner=f"the model at {self._base_url}",
        )

    def render(self, request: ChatRequest, desc: ServerDescription) -> tuple[str, list[MediaInput]]:
        """A chat's prompt text (media as the server's media marker) and its images and clips."""
        marker = self._require_images(request, desc) if request.has_images() else None
        return self._templates.render(request, marker=marker)

    def prompt(
        self, request: PromptRequest, desc: ServerDescription
    ) -> tuple[str | list[int], list[MediaInput]]:
        """The prompt as the server takes it: text (BOS added there), or token ids."""
        if isinstance(request, ChatRequest):
            text, images = self.render(request, desc)
            return text, images
        if not isinstance(request.prompt, str):
            tokens = list(request.prompt)
            n_vocab = desc.info.n_vocab
            bad = [t for t in tokens if not isinstance(t, int) or not 0 <= t < n_vocab]
            if bad:
                raise InvalidRequestError(
                    f"prompt token ids outside the vocabulary: {bad[:5]}",
                    request_id=request.request_id,
                )
            if request.images:
                raise InvalidRequestError(
                    "images need a text prompt that places them with media_marker, not token ids",
                    request_id=request.request_id,
                )
            return tokens, []
        if request.images:
            marker = self._require_images(request, desc)
            images = [
                i if isinstance(i, AudioInput) else require_image(i, "images[]")
                for i in request.images
            ]
            check_markers(request.prompt, marker, len(images), request.request_id)
            return request.prompt, images
        if not request.add_bos and self._adds_bos:
            # The server adds BOS to text: send the tokens, without it.
            tokens = self._transport.tokenize(request.prompt, add_special=False, parse_special=True)
            return tokens, []
        return request.prompt, []

    def _require_images(self, request: GenerationRequest, desc: ServerDescription) -> str:
        if _has_audio(request) and not desc.capabilities.audio:
            raise AudioInputNotSupportedError(
                f"the server at {self._base_url} (llama-server build "
                f"{desc.capabilities.build or 'unknown'}) has no audio projector (start it "
                "with an --mmproj that has an audio encoder)",
                request_id=request.request_id,
            )
        if desc.media_marker is None or (_has_image(request) and not desc.capabilities.vision):
            raise ImageInputNotSupportedError(
                f"the server at {self._base_url} (llama-server build "
                f"{desc.capabilities.build or 'unknown'}) has no image projector (start it "
                "with --mmproj)",
                request_id=request.request_id,
            )
        return desc.media_marker


def check_markers(prompt: str, marker: str, n_images: int, request_id: str) -> None:
    """What libmtmd checks in the local engine: one marker per image, text after the last."""
    count = prompt.count(marker)
    if count != n_images:
        raise InvalidRequestError(
            f"the prompt places {count} image(s) but {n_images} were given", request_id=request_id
        )
    if prompt.rstrip().endswith(marker):
        raise InvalidRequestError(
            "the prompt ends with an image: text must follow it (the model reads the answer's "
            "first token off the last text token)",
            request_id=request_id,
        )


def _has_audio(request: GenerationRequest) -> bool:
    if isinstance(request, ChatRequest):
        return messages_have_audio(request.messages)
    images = getattr(request, "images", ())
    return any(isinstance(item, AudioInput) for item in images)


def _has_image(request: GenerationRequest) -> bool:
    if isinstance(request, ChatRequest):
        return messages_have_images(request.messages) and any(
            isinstance(item, ImageInput) for item in images_in(list(request.messages))
        )
    images = getattr(request, "images", ())
    return any(not isinstance(item, AudioInput) for item in images)
