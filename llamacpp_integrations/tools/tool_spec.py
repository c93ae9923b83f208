"""Tools, tool choices and tool calls, in one framework-neutral shape.

Adapters turn LangChain / LlamaIndex tool objects into :class:`ToolSpec` and read back
:class:`ToolCall`; everything between (prompting, grammar, parsing) works on these.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import InvalidRequestError

__all__ = [
    "InvalidToolCall",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "ToolSpec",
    "new_tool_call_id",
    "normalize_tool_choice",
    "normalize_tools",
    "openai_tool_call",
]

# The names OpenAI-style APIs (and so LangChain and LlamaIndex tools) allow.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")

ToolMode = Literal["none", "auto", "required"]


@dataclass(frozen=True)
class ToolSpec:
    """One function the model may call; ``parameters`` is the JSON schema of its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI ``{"type": "function", "function": {...}}`` form chat templates expect."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": _plain(self.parameters),
            },
        }


@dataclass(frozen=True)
class ToolChoice:
    """``mode`` none / auto / required; ``name`` set means exactly that tool must be called."""

    mode: ToolMode = "auto"
    name: str | None = None

    @property
    def must_call(self) -> bool:
        return self.mode == "required" or self.name is not None


@dataclass(frozen=True)
class ToolCall:
    """A complete call: ``arguments`` parsed, ``arguments_json`` the exact text generated."""

    id: str
    name: str
    arguments: dict[str, Any]
    arguments_json: str

    def to_openai(self) -> dict[str, Any]:
        """The call as OpenAI's chat completions return it (``arguments`` as JSON text)."""
        return openai_tool_call(self.id, self.name, self.arguments_json)


@dataclass(frozen=True)
class InvalidToolCall:
    """A call the answer began but did not complete or could not be read: what came of it
    (``arguments`` is the text written so far) and why it is not a call."""

    id: str
    name: str | None
    arguments: str
    error: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a streamed call: the first piece of call ``index`` has ``id`` and ``name``;
    the ``arguments`` pieces of one call concatenate to its ``arguments_json``."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


def openai_tool_call(call_id: str, name: str, arguments_json: str) -> dict[str, Any]:
    """A call, whole or streamed so far, in OpenAI's chat-completions shape."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments_json},
    }


def new_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _plain(value: Any) -> Any:
    # Frozen requests may hold read-only mappings / tuples; templates and json want dict / list.
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def normalize_tools(tools: Sequence[ToolSpec | Mapping[str, Any]]) -> list[ToolSpec]:
    """Tools from ``ToolSpec`` objects or OpenAI-style dicts (with or without the
    ``{"type": "function", "function": ...}`` wrapper); names must be valid and unique."""
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise InvalidRequestError("tools must be a list of tools")
    specs: list[ToolSpec] = []
    for i, tool in enumerate(tools):
        spec = tool if isinstance(tool, ToolSpec) else _spec_from_mapping(tool, i)
        if not isinstance(spec.name, str) or not _TOOL_NAME.fullmatch(spec.name):
            raise InvalidRequestError(
                f"tools[{i}] name {spec.name!r} must be 1-64 letters, digits, '_', '.' or '-'"
            )
        if not isinstance(spec.parameters, Mapping):
            raise InvalidRequestError(f"tools[{i}] ({spec.name}) parameters must be a JSON schema")
        if spec.parameters.get("type", "object") != "object":
            raise InvalidRequestError(
                f"tools[{i}] ({spec.name}) parameters must describe an object"
            )
        specs.append(spec)
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise InvalidRequestError(f"tool names must be unique; repeated: {', '.join(duplicates)}")
    return specs


def _spec_from_mapping(tool: object, i: int) -> ToolSpec:
    if not isinstance(tool, Mapping):
        raise InvalidRequestError(f"tools[{i}] is a {type(tool).__name__}, not a tool")
    function = tool.get("function", tool)
    if not isinstance(function, Mapping) or "name" not in function:
        raise InvalidRequestError(f"tools[{i}] has no function name")
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    description = function.get("description") or ""
    if not isinstance(description, str):
        raise InvalidRequestError(f"tools[{i}] description must be a string")
    return ToolSpec(name=function["name"], description=description, parameters=parameters)


def normalize_tool_choice(choice: object, tools: Sequence[ToolSpec]) -> ToolChoice:
    """Every spelling frameworks use: ``"none"``, ``"auto"``, ``"required"`` / ``"any"`` /
    ``True``, a tool name, ``{"type": "function", "function": {"name": ...}}``,
    ``{"name": ...}``, or ``None`` (auto)."""
    if isinstance(choice, ToolChoice):
        parsed = choice
    elif choice is None:
        parsed = ToolChoice("auto")
    elif choice is True:
        parsed = ToolChoice("required")
    elif choice is False:
        parsed = ToolChoice("none")
    elif isinstance(choice, str):
        lowered = choice.lower()
        if lowered in ("none", "auto", "required"):
            parsed = ToolChoice(lowered)  # type: ignore[arg-type]  # narrowed by the test above
        elif lowered == "any":
            parsed = ToolChoice("required")
        else:
            parsed = ToolChoice("required", name=choice)
    elif isinstance(choice, Mapping):
        function = choice.get("function", choice)
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str):
            raise InvalidRequestError(
                f"tool_choice {json.dumps(choice, default=str)} names no tool"
            )
        parsed = ToolChoice("required", name=name)
    else:
        raise InvalidRequestError(f"tool_choice {choice!r} is not understood")
    if parsed.mode != "none" and not tools:
        raise InvalidRequestError(f"tool_choice {parsed.mode!r} needs at least one tool")
    if parsed.name is not None and parsed.name not in {tool.name for tool in tools}:
        offered = ", ".join(tool.name for tool in tools)
        raise InvalidRequestError(
            f"tool_choice names {parsed.name!r}, which is not among the tools ({offered})"
        )
    return parsed
