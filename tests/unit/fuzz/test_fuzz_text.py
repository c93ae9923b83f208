"""Fuzzing the pure text paths: the streaming output processor, tool-call parsing of every
syntax, JSON Schema to grammar, and chat template rendering. Only the package's typed errors
may come out; nothing may hang."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from llamacpp_integrations.engine.worker.output import OutputProcessor
from llamacpp_integrations.errors import LlamaCppIntegrationError
from llamacpp_integrations.prompts.chat_template import ChatTemplate
from llamacpp_integrations.tools.call_syntax import SYNTAXES
from llamacpp_integrations.tools.grammar import schema_to_gbnf
from llamacpp_integrations.tools.tool_parser import ToolCallStream

# ---- the streaming output processor -------------------------------------------------------

stops = st.lists(st.text(min_size=1, max_size=6), max_size=3)
pieces = st.lists(
    st.one_of(
        st.binary(max_size=6),  # byte tokens, invalid UTF-8 included
        st.text(max_size=4).map(lambda t: t.encode("utf-8")),
    ),
    max_size=40,
)


@given(stop=stops, feed=pieces)
def test_fuzz_output_processor(stop: list[str], feed: list[bytes]) -> None:
    out = OutputProcessor(stop)
    emitted = "".join(out.feed(piece) for piece in feed) + out.flush()
    assert emitted == out.text
    whole = b"".join(feed).decode("utf-8", errors="replace")
    if out.stopped:
        assert out.stop_string in stop
        assert whole.startswith(emitted) or emitted.endswith("\ufffd") or "\ufffd" in whole
        for s in stop:
            assert s not in emitted  # nothing of a stop string shows
    else:
        assert emitted == whole


@given(stop=st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=3), data=st.data())
def test_fuzz_stop_strings_split_across_tokens(stop: list[str], data: st.DataObject) -> None:
    prefix = data.draw(st.text(max_size=20))
    text = prefix + stop[0] + data.draw(st.text(max_size=10))
    raw = text.encode("utf-8")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=10)))
    parts = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    out = OutputProcessor(stop)
    emitted = "".join(out.feed(p) for p in parts) + out.flush()
    assert out.stopped
    assert text.startswith(emitted)
    assert len(emitted) <= len(prefix)


# ---- tool-call parsing, every syntax ------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def call_texts(draw: st.DrawFn) -> tuple[str, str]:
    name = draw(st.sampled_from(sorted(SYNTAXES)))
    syntax = SYNTAXES[name]
    calls = draw(
        st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["get_weather", "f", "", "x y"]), "arguments": json_values}
            ),
            max_size=3,
        )
    )
    body = syntax.separator.join(
        syntax.call_open + json.dumps(call) + syntax.call_close for call in calls
    )
    text = draw(st.text(max_size=10)) + syntax.lead + body + syntax.trail
    # Mutate: cut it, or splice random text or markers in.
    mutation = draw(st.sampled_from(["none", "cut", "splice"]))
    if mutation == "cut" and text:
        text = text[: draw(st.integers(0, len(text)))]
    elif mutation == "splice":
        at = draw(st.integers(0, len(text)))
        junk = draw(st.sampled_from([syntax.call_open, syntax.call_close, "{", "}", '"', "[", ""]))
        text = text[:at] + junk + draw(st.text(max_size=4)) + text[at:]
    return name, text


@given(case=call_texts(), data=st.data())
def test_fuzz_tool_call_parsing(case: tuple[str, str], data: st.DataObject) -> None:
    name, text = case
    stream = ToolCallStream(SYNTAXES[name])
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        stream.feed(text[a:b])  # feeding never raises: a malformed call is reported by finish
    with contextlib.suppress(LlamaCppIntegrationError):
        stream.finish()


@given(name=st.sampled_from(sorted(SYNTAXES)), text=st.text(max_size=200))
def test_fuzz_tool_call_parsing_random_text(name: str, text: str) -> None:
    stream = ToolCallStream(SYNTAXES[name])
    stream.feed(text)
    with contextlib.suppress(LlamaCppIntegrationError):
        stream.finish()


# ---- JSON Schema to grammar ---------------------------------------------------------------

KEYWORDS: dict[str, st.SearchStrategy[Any]] = {
    "type": st.sampled_from(
        ["string", "integer", "number", "boolean", "null", "object", "array", "nope", 3]
    )
    | st.lists(st.sampled_from(["string", "integer", "null", "object"]), max_size=3),
    "minimum": st.integers(-(10**6), 10**6) | st.floats(allow_nan=False, allow_infinity=False),
    "maximum": st.integers(-(10**6), 10**6) | st.text(max_size=3),
    "exclusiveMinimum": st.integers(-100, 100),
    "minLength": st.integers(-2, 30),
    "maxLength": st.integers(-2, 30),
    "minItems": st.integers(-1, 6),
    "maxItems": st.integers(-1, 6),
    "pattern": st.sampled_from(["^[a-z]+$", "[0-9]{2,3}", "(", "a|b", "\\d+", "^(?!x).*$"]),
    "format": st.sampled_from(["date", "date-time", "email", "uuid", "time", "uri", "bogus"]),
    "enum": st.lists(json_values, max_size=4),
    "const": json_values,
    "required": st.lists(st.text(max_size=4), max_size=3) | st.integers(),
    "additionalProperties": st.booleans(),
    "uniqueItems": st.booleans(),
    "$ref": st.sampled_from(["#/$defs/a", "#/definitions/missing", "http://x/y", "#"]),
    "not": st.just({"type": "string"}),
    "if": st.just({"type": "string"}),
}


def schemas() -> st.SearchStrategy[Any]:
    leaf = st.fixed_dictionaries({}, optional={k: v for k, v in KEYWORDS.items()}) | st.booleans()
    return st.recursive(
        leaf,
        lambda inner: st.fixed_dictionaries(
            {},
            optional={
                "type": KEYWORDS["type"],
                "properties": st.dictionaries(st.text(max_size=6), inner, max_size=3),
                "items": inner,
                "prefixItems": st.lists(inner, max_size=2),
                "anyOf": st.lists(inner, max_size=3),
                "oneOf": st.lists(inner, max_size=3),
                "allOf": st.lists(inner, max_size=2),
                "$defs": st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
                "required": KEYWORDS["required"],
                "additionalProperties": st.booleans() | inner,
            },
        ),
        max_leaves=10,
    )


@given(schema=schemas() | json_values)
def test_fuzz_schema_to_grammar(schema: Any) -> None:
    try:
        grammar = schema_to_gbnf(schema)
    except LlamaCppIntegrationError:
        return
    assert "root ::=" in grammar


# ---- chat templates -----------------------------------------------------------------------

TEMPLATE_PIECES = [
    "{{ messages[0].content }}",
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
    "{{ ''.__class__ }}",
    "{{ messages.__class__.__mro__ }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ range(10**6)|list|length }}",
    "{{ 'a' * 10**9 }}",
    "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}",
    "{{ raise_exception('no') }}",
    "{% if add_generation_prompt %}<|assistant|>{% endif %}",
    "{{ messages|tojson }}",
    "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}",
    "{{ messages[99] }}",
    "{{ undefined_name.attr }}",
    "{% for",
    "{{ }}",
    "{{ 1/0 }}",
    "{{ 'x'|center(10**12) }}",
    "{{ bos_token }}{{ eos_token }}",
]
messages_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "system", "tool"]),
            "content": st.text(max_size=20),
        }
    ),
    min_size=1,
    max_size=4,
)


@given(
    pieces=st.lists(st.sampled_from(TEMPLATE_PIECES) | st.text(max_size=10), max_size=5),
    messages=messages_strategy,
)
def test_fuzz_chat_templates(pieces: list[str], messages: list[dict[str, str]]) -> None:
    try:
        template = ChatTemplate(
            "".join(pieces), bos_token="<s>", eos_token="</s>", render_time_limit=0.5
        )
        out = template.render(messages)
    except LlamaCppIntegrationError:
        return
    assert "<class" not in out and "__globals__" not in out
