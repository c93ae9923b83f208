"""Grammar-constrained structured output and tool calling on the engine.

* ``schema_to_gbnf`` / ``json_object_gbnf`` / ``any_json_gbnf``: JSON schema -> GBNF grammar;
* ``generate_structured`` / ``agenerate_structured``: a JSON value valid for a schema;
* ``generate_with_tools`` / ``stream_with_tools`` (and async twins): answers that may call
  tools, every call well-formed, naming an offered tool, with schema-valid arguments.
"""

from __future__ import annotations

from .call_syntax import HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS, TOOL_CALL_LIST, CallSyntax
from .json_grammar import any_json_gbnf, json_object_gbnf, schema_to_gbnf
from .structured import StructuredResult, agenerate_structured, constrain, generate_structured
from .tool_calling import (
    ToolCallPlan,
    ToolCallResult,
    ToolStreamChunk,
    agenerate_with_tools,
    astream_with_tools,
    generate_with_tools,
    plan_tool_request,
    stream_with_tools,
)
from .tool_parser import ParsedOutput, ToolCallStream, parse_tool_output
from .tool_prompt import TemplateToolSupport, detect_tool_support
from .tool_spec import (
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    ToolSpec,
    new_tool_call_id,
    normalize_tool_choice,
    normalize_tools,
)

__all__ = [
    "HERMES",
    "LLAMA3",
    "MISTRAL",
    "MISTRAL_ARGS",
    "TOOL_CALL_LIST",
    "CallSyntax",
    "ParsedOutput",
    "StructuredResult",
    "TemplateToolSupport",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallPlan",
    "ToolCallResult",
    "ToolCallStream",
    "ToolChoice",
    "ToolSpec",
    "ToolStreamChunk",
    "agenerate_structured",
    "agenerate_with_tools",
    "any_json_gbnf",
    "astream_with_tools",
    "constrain",
    "detect_tool_support",
    "generate_structured",
    "generate_with_tools",
    "json_object_gbnf",
    "new_tool_call_id",
    "normalize_tool_choice",
    "normalize_tools",
    "parse_tool_output",
    "plan_tool_request",
    "schema_to_gbnf",
    "stream_with_tools",
]
