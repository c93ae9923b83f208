"""How each model family writes tool calls, as data shared by prompting, grammar and parsing.

Every syntax wraps JSON call objects (``{"name": ..., "arguments": {...}}``) in its own markers:

* ``hermes`` (Hermes, Qwen 2.5 / 3, and the fallback prompt here, which templates without tool
  support, such as SmolLM2's ChatML, get):
  ``<tool_call>{"name": "f", "arguments": {...}}</tool_call>``, one block per call;
* ``llama3`` (Llama 3.1 - 3.3 custom tools): the whole answer is ``{"name": "f", "parameters":
  {...}}``, optionally after ``<|python_tag|>``; several calls are separated by ``;``;
* ``mistral`` (Mistral v3 templates): ``[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]``;
* ``mistral-args`` (Mistral v11+ templates): ``[TOOL_CALLS]f[ARGS]{...}``, repeated per call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "HERMES",
    "LLAMA3",
    "MISTRAL",
    "MISTRAL_ARGS",
    "SYNTAXES",
    "TOOL_CALL_LIST",
    "CallSyntax",
]


@dataclass(frozen=True)
class CallSyntax:
    """One family's call markup.

    A list of calls is written ``lead`` + ``call_open`` call ``call_close`` (+ ``separator`` +
    ``call_open`` call ``call_close``)* + ``trail``; grammars add optional whitespace around the
    markers, and parsing skips ``between`` tokens between calls.

    Attributes:
        name: The family's name.
        opener: The text that starts the calls; the parser looks for it, and it is the lazy
            grammar's trigger (``""``: calls are recognised only at the start of the answer,
            by ``start_pattern``).
        start_pattern: For syntaxes without an opener: a regex the answer (stripped of leading
            whitespace) starts with when it is a call.
        arguments_key: The key of the arguments object in a call.
        named_args: Calls are ``name[ARGS]{...}`` instead of JSON objects with a name.
        special_markers: The markers are control tokens in the family's vocabulary, so the
            output must be detokenized with special tokens for them to show.
        empty_allowed: An opener followed by an empty list is a valid "no call".
    """

    name: str
    opener: str
    lead: str
    call_open: str
    call_close: str
    separator: str
    trail: str
    between: tuple[str, ...]
    arguments_key: str = "arguments"
    start_pattern: str = ""
    named_args: bool = False
    special_markers: bool = False
    empty_allowed: bool = False

    def trigger_patterns(self, after: str = "") -> tuple[str, ...]:
        """Regexes (llama.cpp lazy-grammar triggers) matching where the calls start; with
        ``after`` (a regex for what precedes the answer, e.g. a reasoning model's finished
        thinking), only calls after it."""
        if not after:
            if self.opener:
                return (re.escape(self.opener),)
            return (rf"^\s*({self.start_pattern})[\s\S]*$",)
        if self.opener:
            return (rf"^{after}[\s\S]*?({re.escape(self.opener)}[\s\S]*)$",)
        return (rf"^{after}\s*((?:{self.start_pattern})[\s\S]*)$",)


HERMES = CallSyntax(
    name="hermes",
    opener="<tool_call>",
    lead="",
    call_open="<tool_call>",
    call_close="</tool_call>",
    separator="\n",
    trail="",
    between=("<tool_call>", "</tool_call>"),
)
LLAMA3 = CallSyntax(
    name="llama3",
    opener="",
    lead="",
    call_open="",
    call_close="",
    separator="; ",
    trail="",
    between=("<|python_tag|>", ";"),
    arguments_key="parameters",
    start_pattern=r"\{|<\|python_tag\|>",
    special_markers=True,
)
MISTRAL = CallSyntax(
    name="mistral",
    opener="[TOOL_CALLS]",
    lead="[TOOL_CALLS][",
    call_open="",
    call_close="",
    separator=", ",
    trail="]",
    between=("[TOOL_CALLS]", "[", "]", ","),
    special_markers=True,
)
MISTRAL_ARGS = CallSyntax(
    name="mistral-args",
    opener="[TOOL_CALLS]",
    lead="",
    call_open="[TOOL_CALLS]",
    call_close="",
    separator="",
    trail="",
    between=("[TOOL_CALLS]",),
    named_args=True,
    special_markers=True,
)
# The fallback prompt's syntax: a JSON list of calls in one ``<tool_call>`` block, the shape
# small instruction-tuned models (SmolLM2's function-calling data among them) were tuned on. A
# list that closes gives the model a natural place to stop.
TOOL_CALL_LIST = CallSyntax(
    name="tool-call-list",
    opener="<tool_call>",
    lead="<tool_call>[",
    call_open="",
    call_close="",
    separator=", ",
    trail="]</tool_call>",
    between=("<tool_call>", "[", ",", "]", "</tool_call>"),
    empty_allowed=True,
)
SYNTAXES = {
    syntax.name: syntax for syntax in (HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS, TOOL_CALL_LIST)
}
