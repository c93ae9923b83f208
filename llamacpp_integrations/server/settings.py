"""What the server holds every request of every API family to, and the one path their chat
calls take: each family reads its body into the client core's ``CallOptions`` and template
messages, and ``ServerSettings.chat_plan`` plans the call the same way for all of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..client import CallOptions, CallPlan, MessagesOf, chat_plan_factory
from ..multimodal import ImagePolicy
from .roster import ModelLease

__all__ = ["ServerSettings"]


@dataclass(frozen=True)
class ServerSettings:
    """What the server holds every request to.

    Attributes:
        image_policy: Which image sources image parts may use (in-memory data URIs only, by
            default).
        request_timeout: Seconds a generation may take from submission (``None``: no limit).
        call_defaults: What a request leaves out takes from here instead of the engine's
            defaults (call options by name: ``temperature``, ``stop``, ``max_tokens``...;
            ``serve`` puts an ``ollama://`` model's manifest parameters here). What a request
            sets wins.
    """

    image_policy: ImagePolicy
    request_timeout: float | None = None
    call_defaults: Mapping[str, Any] = field(default_factory=dict)

    def chat_plan(
        self, model: ModelLease, options: CallOptions, messages_of: MessagesOf
    ) -> Callable[[], CallPlan]:
        """What builds a chat call's plan on ``model``: images read under ``image_policy``,
        and an answer cut by its output limit kept (every API says so in its own way: OpenAI's
        ``finish_reason`` ``length``, Anthropic's ``max_tokens``, an incomplete response)."""
        return chat_plan_factory(
            model.engine,
            options,
            messages_of,
            image_policy=self.image_policy,
            facts=model.facts,
            cut_json="keep",
            cut_calls="keep",
        )
