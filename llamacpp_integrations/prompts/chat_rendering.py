"""Chat requests made into prompt text, the same way for the local and the remote engine.

``ChatTemplates`` holds a model's own template and the last few templates requests brought
(``chat_template=``), each compiled once: a server passing arbitrary templates must not grow
memory without bound, and callers on many threads share one cache, so it is locked. Rendering a
chat prepares its messages and variables (``template_inputs``: reasoning switches, earlier
reasoning under the field the template reads), places its images as the media marker, renders
(adapted to what the template accepts: ``ChatTemplate.render`` and ``polyfills``), and drops a
printed BOS where the vocabulary adds one itself.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..errors import ChatTemplateError
from .chat_template import ChatTemplate, TemplateMessage, messages_to_dicts, strip_leading_bos
from .media import MediaInput, flatten_parts
from .reasoning import ReasoningFormat, ReasoningSpec, template_kwargs_for

__all__ = ["TEMPLATE_CACHE_SIZE", "ChatPrompt", "ChatTemplates", "template_inputs"]

TEMPLATE_CACHE_SIZE = 8

_HISTORY_KEY = "reasoning_content"  # where ChatMessage.to_template_dict puts earlier reasoning


class ChatPrompt(Protocol):
    """What rendering reads of a chat request (the engine's ``ChatRequest``)."""

    @property
    def request_id(self) -> str: ...
    @property
    def messages(self) -> Sequence[TemplateMessage | Mapping[str, Any]]: ...
    @property
    def chat_template(self) -> str | None: ...
    @property
    def add_generation_prompt(self) -> bool: ...
    @property
    def tools(self) -> Sequence[Mapping[str, Any]] | None: ...
    @property
    def template_kwargs(self) -> Mapping[str, Any]: ...
    @property
    def reasoning(self) -> ReasoningSpec | None: ...


def template_inputs(request: ChatPrompt) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages and variables a chat request's template renders.

    For a reasoning model (``request.reasoning``) the template's switch is set as the request
    asks, and earlier reasoning goes under the field the template reads, or is left out where
    the template does not render it.
    """
    messages = messages_to_dicts(request.messages)
    kwargs = dict(request.template_kwargs)
    spec = request.reasoning
    if spec is None:
        return messages, kwargs
    kwargs.update(template_kwargs_for(spec.format, spec.enabled))
    return _with_history(messages, spec.format), kwargs


def _with_history(messages: list[dict[str, Any]], format: ReasoningFormat) -> list[dict[str, Any]]:
    for message in messages:
        reasoning = message.pop(_HISTORY_KEY, None)
        if reasoning is not None and format.renders_history:
            message[format.history_field] = reasoning
    return messages


class ChatTemplates:
    """A model's chat templates, compiled once, and chats rendered with them (thread-safe).

    Args:
        source: The model's own template (``None``: it has none; chats then need
            ``chat_template=``).
        bos_token: The text of the model's BOS token, as templates print it.
        eos_token: The text of its EOS token.
        adds_bos: The vocabulary adds BOS when tokenizing: a BOS the template printed is
            dropped, so the prompt does not start with two.
        owner: Who the model is, for the error when it has no template ("model 'x'").
        capacity: How many request templates stay compiled (least recently used dropped).
    """

    def __init__(
        self,
        source: str | None,
        *,
        bos_token: str = "",
        eos_token: str = "",
        adds_bos: bool = False,
        owner: str = "the model",
        capacity: int = TEMPLATE_CACHE_SIZE,
    ) -> None:
        self._bos_token = bos_token
        self._eos_token = eos_token
        self._adds_bos = adds_bos
        self._owner = owner
        self._capacity = capacity
        self._lock = threading.Lock()
        self._own = self._compile(source) if source else None
        self._brought: OrderedDict[str, ChatTemplate] = OrderedDict()

    def _compile(self, source: str) -> ChatTemplate:
        return ChatTemplate(source, bos_token=self._bos_token, eos_token=self._eos_token)

    def template_for(self, request: ChatPrompt) -> ChatTemplate:
        """The request's own template (compiled at most once while cached), else the model's.

        Raises:
            ChatTemplateError: neither exists, or the request's template does not compile.
        """
        source = request.chat_template
        if source is None:
            if self._own is None:
                raise ChatTemplateError(
                    f"{self._owner} has no chat template: pass chat_template= or use a "
                    "CompletionRequest for raw text",
                    request_id=request.request_id,
                )
            return self._own
        with self._lock:
            template = self._brought.get(source)
            if template is not None:
                self._brought.move_to_end(source)
                return template
        # Compiled outside the lock: another thread may compile the same source meanwhile, and
        # then one of the two equal copies is kept.
        template = self._compile(source)
        with self._lock:
            self._brought[source] = template
            while len(self._brought) > self._capacity:
                self._brought.popitem(last=False)
        return template

    def render(
        self, request: ChatPrompt, *, marker: str | None = None
    ) -> tuple[str, list[MediaInput]]:
        """The chat's prompt text, images as ``marker``, and its images in prompt order.

        ``marker`` is ``None`` when the request has no images.

        Raises:
            InvalidRequestError: no messages, or a malformed one (``messages_to_dicts``).
            ChatTemplateError: no template, or the template failed.
        """
        template = self.template_for(request)
        messages, kwargs = template_inputs(request)
        messages, images = flatten_parts(messages, marker)
        text = template.render(
            messages,
            add_generation_prompt=request.add_generation_prompt,
            tools=list(request.tools) if request.tools is not None else None,
            **kwargs,
        )
        if self._adds_bos:
            text = strip_leading_bos(text, self._bos_token)
        return text, images

    def render_chat(self, request: ChatPrompt) -> str:
        """The prompt text of a chat without images: enough to probe what a template does
        before any model is loaded (a ``ChatRenderer``)."""
        return self.render(request)[0]
