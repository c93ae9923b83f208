"""The request bodies of Anthropic's Messages API (``POST /v1/messages`` and
``POST /v1/messages/count_tokens``), as pydantic models.

The body's outline is typed here; message content blocks and tools are read one by one by the
translation (``messages``, ``options``), so a mistake inside them is
answered with the path of the block at fault (``messages[2].content[1].source``).

Fields are in three groups (the guide's "Anthropic Messages" section lists them):

* honoured: what the translation turns into the call's options;
* refused when set (``REFUSED_FIELDS``): what would change the answer in ways this server
  cannot follow (server-side tools, context editing, effort levels);
* accepted and ignored: what changes nothing here (``metadata``, ``service_tier``,
  ``cache_control``, ``speed``...); any other field is ignored too, as the OpenAI endpoints
  ignore fields they do not know.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..lora_choice import LoraChoice

__all__ = [
    "REFUSED_FIELDS",
    "AnthropicMessage",
    "AnthropicTool",
    "AnthropicToolChoice",
    "CountTokensBody",
    "MessagesBody",
    "OutputConfig",
    "ThinkingConfig",
]

REFUSED_FIELDS: dict[str, str] = {
    "mcp_servers": "MCP servers run on Anthropic's side: declare their tools in tools instead",
    "context_management": "context editing is not supported: send the conversation to keep",
}
"""Top-level fields refused with a 400 when set to anything but null or empty, and why."""


class AnthropicMessage(BaseModel):
    """One turn: its role and its content, a string or a list of content blocks."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class AnthropicTool(BaseModel):
    """A client tool: its name, description and the JSON schema of its input. A ``type``
    other than ``custom`` names one of Anthropic's server tools, which are refused."""

    model_config = ConfigDict(extra="ignore")

    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None


class AnthropicToolChoice(BaseModel):
    """``tool_choice``: ``auto``, ``any`` (some tool), ``tool`` (the one named) or ``none``."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(BaseModel):
    """``thinking``: ``enabled`` (with a budget of thinking tokens), ``disabled``, or
    ``adaptive`` (the model's own default); ``display: omitted`` keeps the thinking's text out
    of the answer."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=0)
    display: Literal["summarized", "omitted"] | None = None


class OutputConfig(BaseModel):
    """``output_config``: ``format`` asks for JSON valid for a schema; ``effort`` is refused
    (nothing here can follow it)."""

    model_config = ConfigDict(extra="ignore")

    format: dict[str, Any] | None = None
    effort: str | None = None


class CountTokensBody(BaseModel):
    """``POST /v1/messages/count_tokens``: what the prompt is made of."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    mcp_servers: list[Any] | None = None
    context_management: dict[str, Any] | None = None


class MessagesBody(CountTokensBody):
    """``POST /v1/messages``: the prompt, and how to answer it."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    stream: bool = False
    metadata: dict[str, Any] | None = None
    lora: list[LoraChoice] | None = None  # llama-server's per-request adapters
