"""Requests made into the prompt a llama-server takes, on this side of the wire.

Chats are rendered with the model's own template (from ``/props``) or a request's
``chat_template`` (compiled ones kept, least recently used dropped), by the engine's
``ChatTemplate``, so a chat reads the same locally and remotely. Images are checked against the
server's projector and media marker before anything is sent.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..engine.chat_template import ChatTemplate, strip_leading_bos, template_inputs
from ..engine.interface import PromptRequest
from ..engine.media import flatten_parts, has_images, require_image
from ..engine.types import ChatRequest, GenerationRequest, ImageInput
from ..errors import ChatTemplateError, ImageInputNotSupportedError, InvalidRequestError
from .server_info import ServerDescription
from .transport import Transport

__all__ = ["TEMPLATE_CACHE_SIZE", "RemotePrompts"]

TEMPLATE_CACHE_SIZE = 8


class RemotePrompts:
    """The prompts of one server's requests (``learn`` it first, once)."""

    def __init__(self, base_url: str, transport: Transport) -> None:
        self._base_url = base_url
        self._transport = transport
        self._lock = threading.Lock()
        self._template: ChatTemplate | None = None
        self._templates: OrderedDict[str, ChatTemplate] = OrderedDict()
        self._adds_bos = False

    def learn(self, desc: ServerDescription) -> None:
        """Read the model's template and whether its vocabulary adds BOS."""
        # Whether the vocabulary adds BOS: then a template's printed BOS is dropped, as the
        # local engine does, so the prompt does not start with two.
        self._adds_bos = bool(self._transport.tokenize("", add_special=True, parse_special=False))
        if desc.info.chat_template:
            self._template = _compile(desc.info.chat_template, desc)

    def render(self, request: ChatRequest, desc: ServerDescription) -> tuple[str, list[ImageInput]]:
        """A chat's prompt text (images as the server's media marker) and its images."""
        template = self._template_for(request, desc)
        messages, kwargs = template_inputs(request)
        if not messages:
            raise InvalidRequestError(
                "a chat needs at least one message", request_id=request.request_id
            )
        marker = self._require_images(request, desc) if has_images(request) else None
        messages, images = flatten_parts(messages, marker)
        text = template.render(
            messages,
            add_generation_prompt=request.add_generation_prompt,
            tools=list(request.tools) if request.tools is not None else None,
            **kwargs,
        )
        return (strip_leading_bos(text, desc.bos_token) if self._adds_bos else text), images

    def prompt(
        self, request: PromptRequest, desc: ServerDescription
    ) -> tuple[str | list[int], list[ImageInput]]:
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
            images = [require_image(i, "images[]") for i in request.images]
            check_markers(request.prompt, marker, len(images), request.request_id)
            return request.prompt, images
        if not request.add_bos and self._adds_bos:
            # The server adds BOS to text: send the tokens, without it.
            tokens = self._transport.tokenize(request.prompt, add_special=False, parse_special=True)
            return tokens, []
        return request.prompt, []

    def _template_for(self, request: ChatRequest, desc: ServerDescription) -> ChatTemplate:
        source = request.chat_template
        if source is None:
            if self._template is None:
                raise ChatTemplateError(
                    f"the model at {self._base_url} has no chat template: pass chat_template= "
                    "or use a CompletionRequest for raw text",
                    request_id=request.request_id,
                )
            return self._template
        with self._lock:
            template = self._templates.get(source)
            if template is None:
                template = self._templates[source] = _compile(source, desc)
                while len(self._templates) > TEMPLATE_CACHE_SIZE:
                    self._templates.popitem(last=False)
            else:
                self._templates.move_to_end(source)
            return template

    def _require_images(self, request: GenerationRequest, desc: ServerDescription) -> str:
        if desc.media_marker is None:
            raise ImageInputNotSupportedError(
                f"the server at {self._base_url} has no image projector (start it with --mmproj)",
                request_id=request.request_id,
            )
        return desc.media_marker


def _compile(source: str, desc: ServerDescription) -> ChatTemplate:
    return ChatTemplate(source, bos_token=desc.bos_token, eos_token=desc.eos_token)


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
