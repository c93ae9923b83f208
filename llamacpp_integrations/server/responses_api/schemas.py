"""The request body of OpenAI's Responses API (``POST /v1/responses``), as pydantic models.

Only the body's outline is typed here: ``input``, ``tools`` and ``tool_choice`` are read item by
item by the translation (``inputs``, ``options``), so a mistake inside them is answered with
the path of the item at fault (``input[2].content[0].image_url``), not with pydantic's account
of every union member it tried.

Fields are in four groups (the guide's "Responses API" section lists them):

* honoured: what the translation turns into the call's options;
* refused when set (``REFUSED_FIELDS``): what needs state or services this server does not
  keep (stored responses, conversations, prompt templates, background runs);
* accepted and ignored: what changes nothing here (``store``, ``metadata``, ``user``...);
  any other field is ignored too, as the chat endpoint ignores fields it does not know;
* extensions: ``seed``, ``top_k``, ``min_p`` and ``repeat_penalty``, as the chat endpoint
  takes them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..lora_choice import LoraChoice
from ..reasoning_effort import ReasoningEffort

__all__ = [
    "REFUSED_FIELDS",
    "ResponsesBody",
    "ResponsesReasoning",
    "ResponsesText",
    "ResponsesTextFormat",
]


REFUSED_FIELDS: dict[str, str] = {
    "previous_response_id": "this server keeps no responses: send the whole conversation in input",
    "conversation": "this server keeps no conversations: send the whole conversation in input",
    "prompt": "this server keeps no prompt templates: send instructions and input",
    "background": "background responses need stored responses, which this server keeps none of",
    "context_management": "context compaction is not supported",
    "moderation": "moderation is not supported",
}
"""Fields refused with a 400 when set (``background`` only when true), and why."""


class ResponsesTextFormat(BaseModel):
    """``text.format``: free text, any JSON object, or JSON valid for a schema."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: Literal["text", "json_schema", "json_object"]
    name: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    def echo(self) -> dict[str, Any]:
        """The format as the response repeats it (OpenAI's field names)."""
        return self.model_dump(by_alias=True, exclude_none=True)


class ResponsesText(BaseModel):
    """``text``: the answer's format, and how long-winded it should be."""

    model_config = ConfigDict(extra="ignore")

    format: ResponsesTextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesReasoning(BaseModel):
    """``reasoning``: how hard a reasoning model thinks (``effort``); a summary, which is
    accepted and not made (the thinking itself comes back, see the guide)."""

    model_config = ConfigDict(extra="ignore")

    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesBody(BaseModel):
    """``POST /v1/responses``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    input: Any  # a string or a list of items, read by inputs
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    text: ResponsesText | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    reasoning: ResponsesReasoning | None = None
    include: list[str] | None = None
    stream: bool = False
    lora: list[LoraChoice] | None = None  # llama-server's per-request adapters
    # Extensions, as the chat endpoint takes them.
    seed: int | None = None
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(default=None, gt=0.0)
    # Accepted and ignored: nothing here depends on them (no truncation ever happens: an input
    # too long is a 400 context_length_exceeded, whichever is asked).
    store: bool | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    # Refused when set (REFUSED_FIELDS).
    previous_response_id: str | None = None
    conversation: Any = None
    prompt: Any = None
    background: bool | None = None
    context_management: Any = None
    moderation: Any = None
