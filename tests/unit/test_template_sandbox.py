"""Hostile chat templates: sandbox escapes are refused, and size and time are bounded.

Chat templates come from model files published by anyone. Each case here must end in a
``ChatTemplateError`` (or render harmlessly), never leak internals, hang, or exhaust memory.
A template may change the lists and dicts it builds, never the values it is given.
"""

from __future__ import annotations

import concurrent.futures
import copy
import os
import signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pytest
from jinja2.exceptions import SecurityError

from llamacpp_integrations.errors import ChatTemplateError
from llamacpp_integrations.prompts import template_sandbox
from llamacpp_integrations.prompts.chat_template import ChatTemplate
from llamacpp_integrations.prompts.template_sandbox import LimitedSandbox

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


def _watchdog_threads() -> int:
    return sum(t.name == "template-watchdog" for t in threading.enumerate())


def test_one_watch_thread_times_every_render_of_a_template() -> None:
    # Concurrent renders share the template's one watch thread; none starts a thread of its own.
    template = ChatTemplate("{{ messages[0].content }}", bos_token="", eos_token="")
    before = _watchdog_threads()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(lambda _: template.render(MESSAGES), range(64)))
    assert outputs == ["hi"] * 64
    assert _watchdog_threads() - before <= 1


def test_a_shorter_limit_fires_before_a_longer_one_that_is_watched() -> None:
    # The watch thread sleeps until the earliest deadline: a render with a short limit that
    # starts while a long one is watched is stopped at its own limit, not the long one's.
    watch = template_sandbox.RenderWatch()
    slow = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    long_limit = threading.Event()
    release = threading.Event()

    def hold_a_long_render() -> None:
        render = watch.render(60.0)
        watch.start(render)
        long_limit.set()
        release.wait(30)
        watch.stop(render)

    holder = threading.Thread(target=hold_a_long_render)
    holder.start()
    try:
        assert long_limit.wait(10)
        compiled = LimitedSandbox().from_string(slow)
        with pytest.raises(ChatTemplateError, match="took over"):
            template_sandbox.render_limited(compiled, {}, time_limit=0.2, watch=watch)
    finally:
        release.set()
        holder.join()


def test_the_watch_thread_ends_when_no_render_is_watched() -> None:
    watch = template_sandbox.RenderWatch(idle_exit_s=0.05)
    compiled = LimitedSandbox().from_string("{{ 1 + 1 }}")
    assert template_sandbox.render_limited(compiled, {}, watch=watch) == "2"
    deadline = time.monotonic() + 10
    while watch.threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watch.threads() == 0
    assert template_sandbox.render_limited(compiled, {}, watch=watch) == "2"  # starts again


def test_recursion_ends_at_the_call_depth_limit_without_unraisable_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Python's own recursion limit would end it too, but unwinding a thousand frames is slow
    # enough to race the time limit, whose exception could then land in a finalizer. The time
    # limit is far off: on a loaded CI machine 0.5 s raced the depth limit, and the watchdog's
    # exception landed in a garbage-collector callback (hypothesis registers one).
    unraisable: list[object] = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)
    source = "{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}"
    template = ChatTemplate(source, bos_token="", eos_token="", render_time_limit=10.0)
    with pytest.raises(ChatTemplateError, match=f"over {template_sandbox.MAX_CALL_DEPTH} deep"):
        template.render(MESSAGES)
    assert unraisable == []
    # A recursion as deep as a nested tool schema renders.
    nested = (
        "{% macro down(n) %}{% if n %}({{ down(n - 1) }}){% endif %}{% endmacro %}{{ down(20) }}"
    )
    assert render(nested) == "(" * 20 + ")" * 20


def test_real_templates_are_unaffected() -> None:
    source = (
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content ~ '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}{{ '=' * 3 }}{{ 2 ** 3 }}"
        "{{ messages|length }}{{ 'a'|center(5) }}{{ messages|tojson }}"
    )
    out = ChatTemplate(source, bos_token="", eos_token="").render(MESSAGES * 3)
    assert out.count("<|user|>hi\n") == 3
    assert "===" in out and "8" in out


# -- values a template builds may change; values it is given may not -----------------------------


def render(source: str, messages: list[dict[str, Any]] | None = None, **extra: Any) -> str:
    template = ChatTemplate(source, bos_token="", eos_token="")
    return template.render(MESSAGES if messages is None else messages, **extra)


def test_template_changes_lists_and_dicts_it_built() -> None:
    # Kimi K2's templates queue tool-call ids so: append as calls come, pop(0) as results do.
    queue = (
        "{% set q = namespace(ids=[]) %}{% set _ = q.ids.append('a') %}"
        "{% set _ = q.ids.append('b') %}{{ q.ids.pop(0) }}{{ q.ids }}"
    )
    assert render(queue) == "a['b']"
    built = "{% set d = {'k': 1} %}{% set _ = d.update({'j': 2}) %}{{ d|tojson }}"
    assert render(built) == '{"k": 1, "j": 2}'
    copied = "{% set c = messages|list %}{% set _ = c.append(1) %}{{ c|length }}"
    messages = [{"role": "user", "content": "hi"}]
    assert render(copied, messages) == "2"
    assert messages == [{"role": "user", "content": "hi"}]


@dataclass
class Settings:
    names: list[str] = field(default_factory=lambda: ["x"])


@dataclass(frozen=True, slots=True)
class Frozen:
    names: list[str]


class Plain:
    def __init__(self) -> None:
        self.names = ["x"]


@pytest.mark.parametrize(
    "source",
    [
        "{% set _ = messages.append(1) %}",
        "{% set _ = messages[0].update({'role': 'x'}) %}",
        "{% set _ = messages[0].tool_calls.pop() %}",
        "{% set _ = messages[0].tool_calls[0].function.clear() %}",
        "{% set m = messages[0] %}{% set _ = m.setdefault('extra', 1) %}",
        "{% set _ = (messages|list)[0].update({'role': 'x'}) %}",
        "{% set _ = tools.append(1) %}",
        "{% set _ = settings.names.append('y') %}",
        "{% set _ = frozen.names.append('y') %}",
        "{% set _ = plain.names.append('y') %}",
        "{% set _ = mapping.inner.append('y') %}",
    ],
)
def test_given_values_stay_unchanged(source: str) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    messages = [{"role": "assistant", "content": "", "tool_calls": [call]}]
    tools = [{"type": "function", "function": {"name": "f"}}]
    values: dict[str, Any] = {
        "settings": Settings(),
        "frozen": Frozen(["x"]),
        "plain": Plain(),
        "mapping": MappingProxyType({"inner": ["x"]}),
    }
    before = copy.deepcopy((messages, tools))
    template = ChatTemplate(source, bos_token="", eos_token="")
    with pytest.raises(ChatTemplateError, match="SecurityError"):
        template.render(messages, tools=tools, **values)
    assert (messages, tools) == before
    assert values["settings"].names == values["frozen"].names == values["plain"].names == ["x"]
    assert values["mapping"]["inner"] == ["x"]


def test_no_value_changes_outside_a_limited_render() -> None:
    # The sandbox alone (no render_limited around it) is as immutable as Jinja's own.
    template = LimitedSandbox().from_string("{% set l = [] %}{% set _ = l.append(1) %}{{ l }}")
    with pytest.raises(SecurityError):
        template.render()


# 10,000 steps, each growing a template's list (ns.v) or dict (ns.w) by one.
LOOP = (
    "{{% set ns = namespace(v=[], w={{}}) %}}{{% for i in range(100) %}}{{% for j in range(100) %}}"
    "{}{{% endfor %}}{{% endfor %}}"
)


@pytest.mark.parametrize(
    "source",
    [
        LOOP.format("{% set _ = ns.v.append(i) %}"),
        LOOP.format("{% set _ = ns.v.insert(0, j) %}"),
        LOOP.format("{% set _ = ns.w.update({i * 100 + j: j}) %}"),
        LOOP.format("{% set _ = ns.w.setdefault(i * 100 + j, j) %}"),
        "{% set big = range(600)|list %}{% set l = [] %}{% set _ = l.extend(big) %}"
        "{% set _ = l.extend(big) %}",  # refused before the second extend runs
        "{% set l = [] %}{% set _ = l.extend(range(600)|map('abs')) %}"
        "{% set _ = l.extend(range(600)|map('abs')) %}",  # of unknown length: checked after
    ],
)
def test_values_grown_in_place_stay_bounded(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(template_sandbox, "MAX_CHARS", 1000)
    with pytest.raises(ChatTemplateError, match="over 1000 items"):
        render(source)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_process_gets_a_watch_thread_of_its_own() -> None:
    # The parent's watch thread does not come along through fork(); the child starts its own,
    # so its renders are still stopped at their limit.
    template = ChatTemplate(
        "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
        bos_token="",
        eos_token="",
        render_time_limit=0.2,
    )
    with pytest.raises(ChatTemplateError):
        template.render(MESSAGES)  # the parent's watch thread now runs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads running
        pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the render was stopped
        signal.alarm(20)  # a render never stopped ends the child (and fails the test)
        try:
            template.render(MESSAGES)
        except ChatTemplateError:
            os._exit(0)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
