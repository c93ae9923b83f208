"""GBNF grammars for tool calls: the markup of a call syntax around schema-checked arguments.

Each offered tool gets its own call rule (its name as a literal, then arguments following its
parameter schema), so a constrained call always names an offered tool with valid arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .call_syntax import CallSyntax
from .grammar import GrammarRules, schema_rule
from .grammar.gbnf import alt, literal, seq
from .tool_spec import ToolSpec

__all__ = ["answer_text_rule", "marker_free_text_rule", "tool_calls_gbnf"]

# Most calls one answer may hold when parallel calls are on: enough for real use, and a bound
# on a small model that, once inside the call list, keeps adding calls instead of stopping.
MAX_PARALLEL_CALLS = 8


def _closed(parameters: Mapping[str, Any]) -> Mapping[str, Any]:
    # A tool's declared parameters are all it takes: without this, a tool with no parameters
    # ({"type": "object", "properties": {}}) would accept any object as arguments.
    if "properties" in parameters and "additionalProperties" not in parameters:
        return {**parameters, "additionalProperties": False}
    return parameters


def _call_rule(rules: GrammarRules, tool: ToolSpec, syntax: CallSyntax) -> str:
    arguments = schema_rule(rules, _closed(tool.parameters), f"{tool.name}-arguments")
    if syntax.named_args:
        return rules.add(f"call-{tool.name}", seq(literal(f"{tool.name}[ARGS]"), arguments))
    body = seq(
        '"{" ws',
        literal('"name"'),
        'ws ":" ws',
        literal(f'"{tool.name}"'),
        'ws "," ws',
        literal(f'"{syntax.arguments_key}"'),
        'ws ":" ws',
        arguments,
        'ws "}"',
    )
    return rules.add(f"call-{tool.name}", body)


def _block(rules: GrammarRules, call: str, syntax: CallSyntax) -> str:
    if syntax.named_args:
        return rules.add("call-block", seq(literal(syntax.call_open), call))
    parts = [call]
    if syntax.call_open:
        parts.insert(0, f"{literal(syntax.call_open)} ws")
    if syntax.call_close:
        parts.append(f"ws {literal(syntax.call_close)}")
    return rules.add("call-block", seq(*parts))


def tool_calls_gbnf(
    tools: Sequence[ToolSpec],
    syntax: CallSyntax,
    *,
    parallel: bool,
    allow_text: bool = False,
    answer_schema: Mapping[str, Any] | None = None,
) -> str:
    """A grammar (root rule ``root``) for one call, or up to ``MAX_PARALLEL_CALLS`` with
    ``parallel``, of the given tools, written in ``syntax``.

    With ``allow_text`` (syntaxes whose call list may be empty) the answer may instead be the
    empty list followed by a text reply that never contains the syntax's opener: the model
    states "no call" where it would list calls, a decision small models make far better than
    choosing between markup and prose at the first token.

    With ``answer_schema`` an answer that calls nothing is a JSON document following it (a
    call with tools and a response format): after the empty list with ``allow_text``, else
    instead of the calls.

    Raises:
        SchemaNotSupportedError: a tool's parameter schema cannot be expressed.
        ValueError: ``allow_text`` with a syntax whose call list cannot be empty.
    """
    rules = GrammarRules()
    rules.fixed("ws")
    call = rules.add("call", alt([_call_rule(rules, tool, syntax) for tool in tools]))
    block = _block(rules, call, syntax)
    separator = syntax.separator.strip()
    more = seq("ws", f"{literal(separator)} ws" if separator else "", block)
    repeated = rules.add("more-calls", more) + f"{{0,{MAX_PARALLEL_CALLS - 1}}}" if parallel else ""
    lead = literal(syntax.lead) if syntax.lead else ""
    if syntax.name == "llama3":
        lead = '"<|python_tag|>"?'
    # Whitespace may end the answer: a model that writes a newline after its call can still
    # stop there instead of being held to writing another call.
    trail = f"ws {literal(syntax.trail)} ws" if syntax.trail else "ws"
    calls = rules.add("calls", seq(lead, "ws" if lead else "", block, repeated, trail))
    if allow_text and not syntax.empty_allowed:
        raise ValueError(f"allow_text needs a syntax with empty call lists, not {syntax.name}")
    if answer_schema is not None:
        document = schema_rule(rules, answer_schema, "answer")
        if allow_text:
            return rules.render(
                f"{calls} | {rules.add('no-call', seq(lead, 'ws', trail, document))}"
            )
        return rules.render(f"{calls} | {document}")
    if not allow_text:
        return rules.render(calls)
    blank_or_marker = " \t\r\n" + syntax.opener[0]
    first = f"[^{_class_escape(blank_or_marker)}]"
    text = marker_free_text_rule(rules, syntax.opener)
    no_call = rules.add("no-call", seq(lead, "ws", trail, first, text))
    return rules.render(f"{calls} | {no_call}")


def answer_text_rule(rules: GrammarRules, syntax: CallSyntax, *, lead_blank: bool) -> str:
    """A rule for a text reply that opens no call in ``syntax``: it does not contain the
    syntax's opener, and for syntaxes whose calls have no opener (Llama 3) it does not start
    like a call. With ``lead_blank`` it may start with blanks and must then say something."""
    if syntax.opener:
        text = marker_free_text_rule(rules, syntax.opener)
        if not lead_blank:
            return text
        first = f"[^{_class_escape(' ' + chr(9) + chr(13) + chr(10) + syntax.opener[0])}]"
        return rules.add("answer", seq("ws", first, text))
    # A call starts the answer with "{" or <|python_tag|>: the reply starts with anything else.
    first = f"[^{_class_escape(' ' + chr(9) + chr(13) + chr(10) + '{<')}]"
    return rules.add("answer", seq("ws" if lead_blank else "", first, "[^\\x00]*"))


def _class_escape(chars: str) -> str:
    return "".join(f"\\x{ord(char):02X}" for char in dict.fromkeys(chars))


def marker_free_text_rule(rules: GrammarRules, marker: str) -> str:
    """A rule for any text (possibly empty) in which ``marker`` never occurs.

    Built from the matching automaton of ``marker`` (Knuth-Morris-Pratt): one rule per count of
    marker characters just matched; a character that would complete the marker has no
    transition. Every rule can end, so the text may stop anywhere.
    """
    if not marker.isascii():
        raise ValueError("marker_free_text_rule handles ASCII markers")
    fallback = [0] * len(marker)
    for i in range(1, len(marker)):
        k = fallback[i - 1]
        while k and marker[i] != marker[k]:
            k = fallback[k - 1]
        fallback[i] = k + 1 if marker[i] == marker[k] else 0

    def step(state: int, char: str) -> int:
        while state and marker[state] != char:
            state = fallback[state - 1]
        return state + 1 if marker[state] == char else 0

    names = [rules.reserve(f"text-{i}") for i in range(len(marker))]
    for state, name in enumerate(names):
        options: list[str] = []
        leaving: set[str] = set()
        for char in dict.fromkeys(marker):
            target = step(state, char)
            if target == 0:
                continue
            leaving.add(char)
            if target < len(marker):
                options.append(f"{literal(char)} {names[target]}")
        options.append(f"[^{_class_escape(''.join(sorted(leaving)))}] {names[0]}")
        rules.define(name, " | ".join(options) + ' | ""')
    return names[0]
