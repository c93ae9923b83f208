"""Grammar-constrained structured output and tool calling, planned and read (pure Python).

* ``schema_to_gbnf`` / ``json_object_gbnf`` / ``any_json_gbnf``: JSON schema -> GBNF grammar;
* ``constrain`` / ``read_structured``: a request whose answer is a JSON value valid for a
  schema, and that value read back;
* ``plan_tool_request`` / ``read_tool_answer`` / ``ToolAnswerReader``: a request whose answer
  may call tools (every call well-formed, naming an offered tool, with schema-valid arguments),
  and its text and calls read back, whole or streamed;
* ``detect_reasoning`` / ``answer_grammar``: which reasoning format a template uses, and
  grammars that constrain a reasoning model's answer only after its thinking;
* ``read_tool_calls``: tool calls handed over in any loose OpenAI shape (earlier answers,
  a framework's response), read with one policy: malformed calls raise ``InvalidRequestError``.

Running a plan is ``llamacpp_integrations.client``'s job (``client.generate`` and kin).
"""

from __future__ import annotations

from .call_syntax import HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS, TOOL_CALL_LIST, CallSyntax
from .given_calls import GivenToolCall, read_tool_calls
from .grammar import any_json_gbnf, json_object_gbnf, schema_to_gbnf
from .loop_guard import answered_calls, canonical_arguments, follow_up_request
from .partial_json import parse_partial_json
from .reasoning_detect import detect_reasoning
from .reasoning_grammar import answer_grammar, answer_trigger_prefix, written_reasoning
from .structured import StructuredResult, constrain, read_structured
from .tool_calling import (
    CutCalls,
    ToolAnswerReader,
    ToolCallPlan,
    ToolCallResult,
    ToolStreamChunk,
    plan_tool_request,
    read_tool_answer,
)
from .tool_parser import ParsedOutput, ToolCallStream, parse_tool_output
from .tool_prompt import TemplateToolSupport, detect_tool_support
from .tool_spec import (
    InvalidToolCall,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    ToolSpec,
    new_tool_call_id,
    normalize_tool_choice,
    normalize_tools,
    openai_tool_call,
)

__all__ = [
    "HERMES",
    "LLAMA3",
    "MISTRAL",
    "MISTRAL_ARGS",
    "TOOL_CALL_LIST",
    "CallSyntax",
    "CutCalls",
    "GivenToolCall",
    "InvalidToolCall",
    "ParsedOutput",
    "StructuredResult",
    "TemplateToolSupport",
    "ToolAnswerReader",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallPlan",
    "ToolCallResult",
    "ToolCallStream",
    "ToolChoice",
    "ToolSpec",
    "ToolStreamChunk",
    "answer_grammar",
    "answer_trigger_prefix",
    "answered_calls",
    "any_json_gbnf",
    "canonical_arguments",
    "constrain",
    "detect_reasoning",
    "detect_tool_support",
    "follow_up_request",
    "json_object_gbnf",
    "new_tool_call_id",
    "normalize_tool_choice",
    "normalize_tools",
    "openai_tool_call",
    "parse_partial_json",
    "parse_tool_output",
    "plan_tool_request",
    "read_structured",
    "read_tool_answer",
    "read_tool_calls",
    "schema_to_gbnf",
    "written_reasoning",
]
