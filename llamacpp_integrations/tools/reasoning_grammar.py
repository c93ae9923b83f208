"""Grammars that let a reasoning model think first: constraints apply to the answer only.

A structured answer or a tool call from a reasoning model comes after its reasoning. So a
grammar of the answer (any grammar this package builds: ``root ::= ...`` first, then its
rules) is wrapped to accept the reasoning first, free text up to the format's end marker
(``answer_grammar``); and a lazy grammar's triggers are rewritten to fire only after that
marker, so a call marker written while thinking does not start a call
(``CallSyntax.trigger_patterns(after=...)`` with ``answer_trigger_prefix``).
"""

from __future__ import annotations

import re

from ..prompts.reasoning import (
    HARMONY_ANSWER_PREFIX,
    ReasoningFormat,
    ReasoningSpec,
    forced_end,
)
from .grammar import GrammarRules
from .grammar.gbnf import literal
from .tool_grammar import marker_free_text_rule

__all__ = [
    "answer_grammar",
    "answer_trigger_prefix",
    "grammar_after_reasoning",
    "reasoning_done_pattern",
    "written_reasoning",
]

_ANSWER = "@answer@"  # where the answer's root goes: no rule name looks like it


def answer_grammar(spec: ReasoningSpec, grammar: str) -> str:
    """``grammar`` for the answer, after the reasoning (see ``grammar_after_reasoning``);
    unchanged when the request turned reasoning off."""
    if not spec.expected:
        return grammar
    return grammar_after_reasoning(grammar, spec.format, inside=spec.inside)


def answer_trigger_prefix(spec: ReasoningSpec) -> str:
    """What must precede a lazy grammar's trigger (``""`` when no reasoning comes)."""
    if not spec.expected:
        return ""
    return reasoning_done_pattern(spec.format, inside=spec.inside)


def written_reasoning(spec: ReasoningSpec, reasoning: str) -> str:
    """``reasoning`` as the model writes it, markers included, up to where its answer starts
    (for continuing the answer after it); ``""`` when it did not think."""
    inside = spec.inside
    if not reasoning and not inside:
        return ""
    format = spec.format
    if format.family == "gpt-oss":
        head = "" if inside else format.start
        return f"{head}{reasoning}{forced_end(format)}"
    head = "" if inside else f"{format.start}\n"
    return f"{head}{reasoning}\n{forced_end(format)}"


def grammar_after_reasoning(grammar: str, format: ReasoningFormat, *, inside: bool) -> str:
    """``grammar`` (root rule first) preceded by the reasoning: free text closed by the
    format's end marker; optional unless the prompt opened it (``inside``)."""
    head, _, rules_text = grammar.partition("\n")
    if not head.startswith("root ::= "):
        raise ValueError("the grammar must start with its root rule")
    answer = head.removeprefix("root ::= ")
    rules = GrammarRules()
    text = marker_free_text_rule(rules, format.end)  # reasoning runs up to its end
    blanks = "[ \\t\\r\\n]{0,16}"
    if format.family == "gpt-oss":
        reasoning = f"{literal(format.start)} {text} {literal(format.end + HARMONY_ANSWER_PREFIX)}"
        if not inside:
            reasoning = f"({reasoning})?"
        prefix = f"{reasoning} {literal(format.answer_start or '')}"
    else:
        closed = f"{text} {literal(format.end)} {blanks}"
        prefix = closed if inside else f"({blanks} {literal(format.start)} {closed})?"
    # Our rules are renamed away from the answer's before the answer goes in, so that the
    # answer's references stay as they are.
    own = _renamed(rules.render(f"{prefix} {_ANSWER}"), avoid=grammar)
    return own.replace(_ANSWER, f"({answer})", 1) + rules_text


def _renamed(grammar: str, *, avoid: str) -> str:
    """Rules of ``grammar`` renamed away from the names used in ``avoid`` (root stays)."""
    used = set(re.findall(r"^([A-Za-z0-9-]+) ::=", avoid, re.MULTILINE))
    names = [n for n in re.findall(r"^([A-Za-z0-9-]+) ::=", grammar, re.MULTILINE) if n != "root"]
    for name in names:
        if name in used:
            fresh = f"reasoning-{name}"
            grammar = re.sub(rf"(?<![A-Za-z0-9-]){re.escape(name)}(?![A-Za-z0-9-])", fresh, grammar)
    return grammar


def reasoning_done_pattern(format: ReasoningFormat, *, inside: bool) -> str:
    """A regex (ECMAScript) matching the start of an output up to the end of its reasoning,
    or the empty start of an output that does not open any; it never matches inside
    reasoning still going on."""
    end = re.escape(format.end)
    if format.family == "gpt-oss":
        opening = re.escape(format.start)
        if inside:
            return rf"[\s\S]*?{end}"
        return rf"(?:{opening}[\s\S]*?{end}|(?!{opening}))"
    if inside:
        return rf"[\s\S]*?{end}"
    start = re.escape(format.start)
    return rf"(?:\s*{start}[\s\S]*?{end}|(?!\s*{start}))"
