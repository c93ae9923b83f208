"""Hostile chat templates: sandbox escapes are refused, and size and time are bounded.

Chat templates come from model files published by anyone. Each case here must end in a
``ChatTemplateError`` (or render harmlessly), never leak internals, hang, or exhaust memory.
"""

from __future__ import annotations

import pytest

from llamacpp_integrations.errors import ChatTemplateError
from llamacpp_integrations.prompts.chat_template import ChatTemplate

MESSAGES = [{"role": "user", "content": "hi"}]

ESCAPES = [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ lipsum.__globals__['os'] }}",
    "{{ raise_exception.__globals__ }}",
    "{{ strftime_now.__globals__ }}",
    "{{ messages.__class__.__base__.__subclasses__() }}",
    "{{ self._TemplateReference__context }}",
    "{{ (messages|attr('__class__')).__mro__ }}",
    "{{ messages|attr('__class__') }}",
    "{{ ''['__class__'] }}",
    "{{ request.application.__globals__ }}",
    "{{ config.__class__.__init__.__globals__ }}",
    "{% set x = messages.append(1) %}{{ messages }}",
    "{% set x = messages[0].update({'role': 'x'}) %}",
    "{{ '{0.__class__}'.format(messages) }}",
    "{{ '{x.__class__}'.format_map({'x': messages}) }}",
    "{{ ().__class__.__base__ }}",
]


@pytest.mark.parametrize("source", ESCAPES)
def test_sandbox_escapes_are_refused(source: str) -> None:
    template = ChatTemplate(source, bos_token="", eos_token="")
    try:
        out = template.render(MESSAGES)
    except ChatTemplateError:
        return
    # What renders must be harmless: Jinja's undefined (empty), never an internal object.
    for leak in ("<class", "<module", "<built-in", "<function", "__builtins__", "uid="):
        assert leak not in out, out
    assert MESSAGES == [{"role": "user", "content": "hi"}]  # nothing mutated


RESOURCE_BOMBS = [
    "{{ range(10**10)|list }}",
    "{{ 'a' * 10**10 }}",
    "{{ 10**10 * 'a' }}",
    "{{ [1] * 10**9 }}",
    "{{ 2 ** (10**9) }}",
    "{{ ('a' * 1000000).replace('a', 'a' * 1000) }}",
    "{{ ('a' * 1000000)|replace('', 'a' * 1000) }}",
    "{{ 'a'.center(10**10) }}",
    "{{ 'a'|center(10**10) }}",
    "{{ 'a'|indent(10**10) }}",
    "{{ 'a'.ljust(10**10) }}",
    "{{ '%0*d' % (10**10, 1) }}",
    "{{ 'x'.zfill(10**10) }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s|length }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s|length }}",
    "{% for i in range(99999) %}{% for j in range(99999) %}{{ 'xxxxxxxxxx' }}{% endfor %}"
    "{% endfor %}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% for i in range(99999) %}{% for j in range(99999) %}{% for k in range(99999) %}"
    "{% endfor %}{% endfor %}{% endfor %}",
    "{% for a in messages * 100000 %}{% for b in messages * 100000 %}{% endfor %}{% endfor %}",
    "{{ ('a' * 1000000) | replace('a', 'a' * 1000) }}",
    "{{ ('a' * 100000)|wordwrap(1) * 100 }}",
]


@pytest.mark.parametrize("source", RESOURCE_BOMBS)
def test_resource_bombs_end_with_a_typed_error(source: str) -> None:
    template = ChatTemplate(source, bos_token="", eos_token="", render_time_limit=1.0)
    with pytest.raises(ChatTemplateError):
        template.render(MESSAGES)


def test_time_limit_names_itself() -> None:
    source = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    template = ChatTemplate(source, bos_token="", eos_token="", render_time_limit=0.2)
    with pytest.raises(ChatTemplateError, match="took over"):
        template.render(MESSAGES)
    # The interrupted thread is fine afterwards, and a normal render is not interrupted.
    ok = ChatTemplate("{{ messages[0].content }}", bos_token="", eos_token="")
    assert ok.render(MESSAGES) == "hi"


def test_real_templates_are_unaffected() -> None:
    source = (
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content ~ '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}{{ '=' * 3 }}{{ 2 ** 3 }}"
        "{{ messages|length }}{{ 'a'|center(5) }}{{ messages|tojson }}"
    )
    out = ChatTemplate(source, bos_token="", eos_token="").render(MESSAGES * 3)
    assert out.count("<|user|>hi\n") == 3
    assert "===" in out and "8" in out
