"""Limits on what a chat template may cost: output size, string growth and render time.

Jinja's sandbox keeps a template away from Python internals, but not from the machine: a
template can multiply a string by ten billion, double a variable in a loop, or nest loops that
never end. Chat templates come from model files published by anyone, so rendering one must
end, quickly and in bounded memory, whatever it does:

- every string or list a template builds (``*``, ``+``, ``~``, filters, method calls) is
  checked against ``MAX_CHARS``, and an operation whose result would be larger is refused
  before it allocates where that can be known in advance (``'a' * n``, ``'a'.center(n)``);
- the rendered output is counted as it is produced and stops at ``MAX_CHARS``;
- calls nest at most ``MAX_CALL_DEPTH`` deep, so a macro that calls itself ends at once with
  a clear error instead of deep in Python's own recursion limit, whose unwinding through a
  thousand frames is slow enough to race the time limit;
- a render that runs longer than its time limit is interrupted: a watchdog thread raises an
  exception in the rendering thread (``PyThreadState_SetAsyncExc``), which stops any loop of
  Jinja's pure-Python code at its next bytecode boundary. One thread per template watches all
  its renders (``RenderWatch``); a template cannot be stopped any other way short of a
  subprocess.

Each limit ends the render with ``ChatTemplateError`` naming it.

The values a render is given (messages, tools, variables: everything reachable from its
context when it starts) cannot be changed by the template, as in Jinja's immutable sandbox. The
lists and dicts a template builds itself it may change (``ids.append(x)``, ``d.update(...)``):
some published templates keep a queue of tool-call ids that way (Kimi K2's). A value grown so
is bounded by ``MAX_CHARS`` items like any other.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Set
from contextlib import contextmanager
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment, modifies_known_mutable

from ..errors import ChatTemplateError

__all__ = [
    "MAX_CALL_DEPTH",
    "MAX_CHARS",
    "RENDER_TIME_LIMIT_S",
    "LimitedSandbox",
    "RenderWatch",
    "render_limited",
]

MAX_CHARS = 16 * 1024 * 1024
"""The longest string or list a template may build, and the longest output (characters)."""

MAX_CALL_DEPTH = 64
"""How deeply a template's calls (macros, filters, methods) may nest. Published templates that
recurse (over a tool's JSON schema) nest as deep as the schema, a handful of levels."""

RENDER_TIME_LIMIT_S = 5.0
"""How long one render may run (real templates take a millisecond or so)."""

# ``2 ** n`` past this is a number thousands of digits long: no template needs one.
_MAX_EXPONENT = 4096


class _RenderTimeout(BaseException):
    """Raised inside the rendering thread by the watchdog. A ``BaseException`` so that no
    ``except Exception`` on the way (Jinja's or a filter's) can swallow it."""


class _LimitExceeded(Exception):
    pass


_SIZED = (str, bytes, list, tuple, dict, set, frozenset, deque)


def _size(value: object) -> int:
    return len(value) if isinstance(value, _SIZED) else 0


def _check_size(value: object) -> object:
    if _size(value) > MAX_CHARS:
        raise _LimitExceeded(f"the template built a value over {MAX_CHARS} items long")
    return value


def _check_int_args(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    # Widths, counts and repetitions are how a call asks for a huge allocation
    # ('x'.center(10**10), 'x'|indent(10**10)); none of a real template's is near the limit.
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_CHARS:
            raise _LimitExceeded(f"the template passed {value} to a call (over {MAX_CHARS})")


def _check_replace(args: tuple[Any, ...]) -> None:
    """Refuse a ``replace`` whose result would be too long, before it is built."""
    if len(args) >= 3 and all(isinstance(a, str) for a in args[:3]):
        text, old, new = args[:3]
        grows = len(new) - len(old)
        hits = text.count(old) if old else len(text) + 1
        if grows > 0 and len(text) + hits * grows > MAX_CHARS:
            raise _LimitExceeded(f"the template's replace would build over {MAX_CHARS} characters")


def _checked_filter(fn: Callable[..., Any]) -> Callable[..., Any]:
    is_replace = fn.__name__ == "do_replace"

    @functools.wraps(fn)  # keeps jinja_pass_arg, which tells Jinja what to pass first
    def checked(*args: Any, **kwargs: Any) -> Any:
        _check_int_args(args, kwargs)
        if is_replace:
            _check_replace(tuple(str(a) for a in args[1:4]))  # after the eval context
        return _check_size(fn(*args, **kwargs))

    return checked


class _CheckedCodeGenerator(CodeGenerator):
    """Compiles ``a ~ b`` to a join that checks the length of what it builds."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.checked_join((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


_render_state = threading.local()  # the ids of the values the current render was given


def _given_ids() -> frozenset[int] | None:
    return getattr(_render_state, "given", None)


def _reachable_ids(root: object) -> frozenset[int]:
    """The ids of ``root`` and of every value reachable from it through containers, dataclass
    fields and instance attributes: what a template could reach and try to change."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        value = stack.pop()
        if id(value) in seen or isinstance(value, str | bytes | int | float | bool | None):
            continue
        seen.add(id(value))
        if isinstance(value, Mapping):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list | tuple | deque | Set):
            stack.extend(value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            stack.extend(getattr(value, f.name, None) for f in dataclasses.fields(value))
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            stack.extend(vars(value).values())
    return frozenset(seen)


@contextmanager
def _given(context: Mapping[str, Any]) -> Iterator[None]:
    previous = _given_ids()
    _render_state.given = _reachable_ids(context)
    try:
        yield
    finally:
        _render_state.given = previous


class LimitedSandbox(SandboxedEnvironment):
    """Jinja's sandbox, with the size checks above on every way to build a value, and the
    values a render was given kept unchanged (outside ``render_limited`` no list or dict may
    be changed at all, as in Jinja's immutable sandbox)."""

    code_generator_class = _CheckedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, fn in list(self.filters.items()):
            self.filters[name] = _checked_filter(fn)

    def wrap_filters(self) -> None:
        """Check filters added after construction too (call after adding them)."""
        for name, fn in list(self.filters.items()):
            if not hasattr(fn, "__wrapped__"):
                self.filters[name] = _checked_filter(fn)

    def checked_join(self, parts: tuple[Any, ...]) -> str:
        total = 0
        texts = []
        for part in parts:
            text = str(part)
            total += len(text)
            if total > MAX_CHARS:
                raise _LimitExceeded(f"the template built a string over {MAX_CHARS} characters")
            texts.append(text)
        return "".join(texts)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(times, int) and _size(seq) * times > MAX_CHARS:
                    raise _LimitExceeded(
                        f"the template multiplied a value to over {MAX_CHARS} items"
                    )
        elif operator == "**":
            if isinstance(right, int) and isinstance(left, int) and abs(right) > _MAX_EXPONENT:
                raise _LimitExceeded(f"the template raised a number to the power {right}")
        elif operator == "%" and isinstance(left, str):
            # printf-style widths: '%0*d' % (10**10, 1)
            _check_int_args(right if isinstance(right, tuple) else (right,), {})
        elif operator == "+" and _size(left) + _size(right) > MAX_CHARS:
            raise _LimitExceeded(f"the template built a value over {MAX_CHARS} items long")
        return super().call_binop(context, operator, left, right)

    def call(
        __self,  # Jinja's signature: a template may pass a keyword named self
        __context: Context,
        __obj: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        _check_int_args(args, kwargs)
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", None)
        if name == "replace" and isinstance(owner, str):
            _check_replace((owner, *args))
        grows = isinstance(name, str) and modifies_known_mutable(owner, name)
        # append, extend, update...: what is known to be too big is refused up front
        added = sum(_size(a) for a in (*args, *kwargs.values()))
        if grows and _size(owner) + added > MAX_CHARS:
            raise _LimitExceeded(f"the template grew a value to over {MAX_CHARS} items")
        depth = getattr(_render_state, "call_depth", 0)
        if depth >= MAX_CALL_DEPTH:
            raise _LimitExceeded(f"the template nested calls over {MAX_CALL_DEPTH} deep")
        _render_state.call_depth = depth + 1
        try:
            result = super().call(__context, __obj, *args, **kwargs)
        finally:
            _render_state.call_depth = depth
        if grows:  # and whatever it took from an iterator of unknown length afterwards
            _check_size(owner)
        return _check_size(result)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not super().is_safe_attribute(obj, attr, value):
            return False
        if not modifies_known_mutable(obj, attr):
            return True
        given = _given_ids()
        return given is not None and id(obj) not in given


@dataclasses.dataclass(eq=False)
class _Render:
    """One render being watched: the thread to interrupt, and when."""

    thread_id: int
    fire_at: float
    fired: bool = False


class RenderWatch:
    """Interrupts the renders that run past their time limit, from one thread shared by all of
    them: the watch of one template, however many threads render it at once.

    The thread raises ``_RenderTimeout`` in a render's thread at its deadline, and again every
    50 ms until the render ends: an asynchronous exception that lands in a garbage-collector
    callback or a ``__del__`` is swallowed there, and the loop it was meant to end would go on.
    It starts with the first render and ends after ``idle_exit_s`` without one, so a template
    that is no longer used leaves no thread behind. A render costs a lock and, at most, one
    wake-up of the thread (when it waits for nothing or for a later deadline); a thread per
    render cost about 0.6 ms to start in a busy process, while other calls waited for the GIL.
    """

    REFIRE_S = 0.05

    def __init__(self, idle_exit_s: float = 30.0) -> None:
        self._idle_exit_s = idle_exit_s
        self._cond = threading.Condition()
        self._renders: set[_Render] = set()
        self._thread: threading.Thread | None = None
        self._wake_at: float | None = None  # when the thread wakes by itself; None: idle

    def render(self, time_limit: float) -> _Render:
        """A render of the calling thread, to ``start`` watching; nothing fires before."""
        return _Render(threading.get_ident(), time.monotonic() + time_limit)

    def start(self, render: _Render) -> None:
        """Watch ``render`` until ``stop``. Call it inside the ``try`` that catches
        ``_RenderTimeout``: with a short limit the exception may land as it returns."""
        with self._cond:
            self._renders.add(render)
            # Not alive though set: the process forked, and only the forking thread came along.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="template-watchdog", daemon=True
                )
                self._thread.start()
            elif self._wake_at is None or render.fire_at < self._wake_at:
                self._cond.notify()

    def stop(self, render: _Render) -> None:
        """Stop watching ``render`` (again is harmless); withdraw an exception raised as it
        ended and not delivered yet, which would otherwise land in whatever runs next."""
        with self._cond:
            self._renders.discard(render)
            if render.fired:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(render.thread_id), None)

    def threads(self) -> int:
        """1 while the watch's thread runs, else 0 (tests)."""
        with self._cond:
            return 0 if self._thread is None else 1

    def _run(self) -> None:
        with self._cond:
            while True:
                if not self._renders:
                    self._wake_at = None
                    if not self._cond.wait(self._idle_exit_s) and not self._renders:
                        self._thread = None
                        return
                    continue
                now = time.monotonic()
                for render in self._renders:
                    if render.fire_at <= now:
                        render.fired = True
                        render.fire_at = now + self.REFIRE_S
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(
                            ctypes.c_ulong(render.thread_id), ctypes.py_object(_RenderTimeout)
                        )
                self._wake_at = min(render.fire_at for render in self._renders)
                self._cond.wait(self._wake_at - now)


def render_limited(
    template: jinja2.Template,
    context: Mapping[str, Any],
    *,
    watch: RenderWatch,
    time_limit: float = RENDER_TIME_LIMIT_S,
    max_chars: int = MAX_CHARS,
) -> str:
    """Render ``template`` within the limits; the values in ``context`` stay unchanged.
    ``watch`` times the render (the template's own, shared by all its renders).

    Raises:
        ChatTemplateError: the template exceeded a limit (the message says which). Any other
            exception of the template's is left to the caller.
    """
    render = watch.render(time_limit)
    pieces: list[str] = []
    try:
        with _given(context):
            try:
                watch.start(render)  # inside: with a short limit it may fire while starting
                total = 0
                for piece in template.generate(context):
                    total += len(piece)
                    if total > max_chars:
                        raise _LimitExceeded(f"the rendered prompt is over {max_chars} characters")
                    pieces.append(piece)
            finally:
                watch.stop(render)
    except _RenderTimeout:
        # Once more: the timeout may have landed inside the first stop, before it took hold,
        # and a render left watched would be raised into whatever this thread does next.
        watch.stop(render)
        raise ChatTemplateError(
            f"chat template rendering took over {time_limit:g} s (stopped)"
        ) from None
    except _LimitExceeded as exc:
        raise ChatTemplateError(f"chat template exceeded a limit: {exc}") from None
    if render.fired:  # it fired as the render ended: the render did not finish in time
        raise ChatTemplateError(f"chat template rendering took over {time_limit:g} s (stopped)")
    return "".join(pieces)
