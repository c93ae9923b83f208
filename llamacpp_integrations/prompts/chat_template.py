"""Render chat messages with a GGUF (Hugging Face style) Jinja chat template, safely.

Chat templates come from model files, i.e. from whoever published the model, so they run in
Jinja's sandbox (``template_sandbox``): no access to Python internals, no mutation of the
values passed in, bounded size and time.
The environment mimics the one ``transformers`` renders templates with (``trim_blocks``,
``lstrip_blocks``, ``raise_exception``, ``strftime_now``, its ``tojson``), since that is the one
template authors test against.

``render`` first adapts the conversation to what the template accepts (``template_caps``
probes that once per compiled template; ``polyfills`` adapts), so that a template refusing a
system message or two user turns in a row still renders one; ``render_exact`` renders exactly
what it is given.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, runtime_checkable

import jinja2
from jinja2 import meta, nodes
from jinja2.ext import Extension, loopcontrols

from ..errors import ChatTemplateError, InvalidRequestError
from .polyfills import adapt_messages, adapt_tools, template_variables
from .template_caps import TemplateCaps, probe_caps
from .template_sandbox import RENDER_TIME_LIMIT_S, LimitedSandbox, RenderWatch, render_limited

if TYPE_CHECKING:
    from jinja2.parser import Parser

__all__ = ["ChatTemplate", "TemplateMessage", "messages_to_dicts", "strip_leading_bos"]


@runtime_checkable
class TemplateMessage(Protocol):
    """A chat message object (the engine's ``ChatMessage``) that knows its template dict."""

    def to_template_dict(self) -> dict[str, Any]: ...


class _GenerationTag(Extension):
    """Accept ``{% generation %}...{% endgeneration %}`` and render just its body.

    ``transformers`` uses the tag to mark assistant text for training masks; some published
    templates contain it, and without this they would not even compile.
    """

    tags = {"generation"}  # noqa: RUF012 -- jinja2 reads it as a plain class attribute

    def parse(self, parser: Parser) -> list[nodes.Node]:
        next(parser.stream)  # the "generation" name token
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _raise_exception(message: object) -> NoReturn:
    # Templates call this to reject conversations they cannot express (e.g. roles not
    # alternating); that is the caller's mistake, hence an InvalidRequestError subclass.
    raise ChatTemplateError(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _json_default(value: object) -> object:
    # Messages and tools may hold read-only mappings / tuples-like sequences (frozen request
    # dataclasses); json only knows dict and list. Filters such as ``map`` give generators,
    # which templates pass straight to tojson (``tools|map(attribute='function')|tojson``).
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _tojson(
    value: Any,
    indent: int | str | None = None,
    ensure_ascii: bool = False,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson HTML-escapes and takes only ``indent``; templates are written against
    # the transformers variant: plain json.dumps, non-ASCII kept as is.
    return json.dumps(
        value,
        indent=indent,
        ensure_ascii=ensure_ascii,
        separators=separators,
        sort_keys=sort_keys,
        default=_json_default,
    )


def _make_environment() -> LimitedSandbox:
    # Sandboxed, and limited in output size, string growth and render time (template_sandbox).
    env = LimitedSandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[loopcontrols, _GenerationTag],
        # The default Undefined, not StrictUndefined: templates test optional variables
        # (``tools``, ``message.tool_calls``...) by their being falsy when absent.
        undefined=jinja2.Undefined,
    )
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    env.wrap_filters()
    return env


class ChatTemplate:
    """A compiled chat template; ``render`` turns messages into the prompt text."""

    reads: frozenset[str]
    """The variables the template reads without setting them (``polyfills`` fills some)."""

    def __init__(
        self,
        source: str,
        *,
        bos_token: str,
        eos_token: str,
        render_time_limit: float = RENDER_TIME_LIMIT_S,
    ) -> None:
        self.source = source
        self.render_time_limit = render_time_limit
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._caps: TemplateCaps | None = None
        self._caps_lock = threading.Lock()
        self._watch = RenderWatch()  # one thread times every render of this template
        environment = _make_environment()
        try:
            parsed = environment.parse(source)
            self.reads = frozenset(meta.find_undeclared_variables(parsed))
            self._template = environment.from_string(parsed)
        except jinja2.TemplateSyntaxError as exc:
            raise ChatTemplateError(
                f"chat template has a syntax error at line {exc.lineno}: {exc.message}"
            ) from exc
        except jinja2.TemplateError as exc:  # e.g. an unknown filter name
            raise ChatTemplateError(f"chat template does not compile: {exc}") from exc

    @property
    def caps(self) -> TemplateCaps:
        """What the template refuses, probed on first use (see ``template_caps``)."""
        with self._caps_lock:  # one probe per template, however many threads render it
            if self._caps is None:
                self._caps = probe_caps(self._probe, budget=self.render_time_limit)
            return self._caps

    def _probe(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        time_limit: float,
    ) -> str:
        context = self._context(messages, True, tools, template_variables(self.reads, tools))
        return self._render_context(context, time_limit)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        """Render ``messages``, adapted to what the template accepts (``polyfills``);
        ``extra`` become further template variables, over the ones ``template_variables``
        supplies.

        ``tools`` is only defined for the template when given: templates test
        ``{% if tools %}`` / ``tools is defined`` to decide whether to describe tools.

        Raises:
            InvalidRequestError: a message is malformed.
            ChatTemplateError: the template failed (it raised, or touched something forbidden).
        """
        _validate_messages(messages)
        caps = self.caps
        adapted_tools = adapt_tools(caps, tools)
        variables = {**template_variables(self.reads, adapted_tools), **extra}
        return self.render_exact(
            adapt_messages(caps, messages),
            add_generation_prompt=add_generation_prompt,
            tools=adapted_tools,
            **variables,
        )

    def render_exact(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        """Render ``messages``, ``tools`` and the variables ``extra`` exactly as given.

        Raises:
            InvalidRequestError: a message is malformed.
            ChatTemplateError: the template failed (it raised, or touched something forbidden).
        """
        _validate_messages(messages)
        context = self._context(messages, add_generation_prompt, tools, extra)
        return self._render_context(context, self.render_time_limit)

    def _context(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None,
        extra: Mapping[str, Any],
    ) -> dict[str, Any]:
        # ``extra`` first, so a caller's template_kwargs cannot replace the variables that
        # every template depends on.
        context: dict[str, Any] = dict(extra)
        context.update(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )
        if tools is not None:
            context["tools"] = tools
        return context

    def _render_context(self, context: Mapping[str, Any], time_limit: float) -> str:
        try:
            return render_limited(self._template, context, time_limit=time_limit, watch=self._watch)
        except ChatTemplateError:
            raise  # from raise_exception(): the template's own message is the best one
        except Exception as exc:  # anything the template makes go wrong is a template failure
            raise ChatTemplateError(
                f"chat template failed to render: {type(exc).__name__}: {exc}"
            ) from exc


def _validate_messages(messages: object) -> None:
    # Typed ``object``: this is the runtime check of what the annotations only promise.
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidRequestError("messages must be a list of messages")
    if not messages:
        raise InvalidRequestError("messages is empty")
    problems: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            problems.append(f"messages[{i}] is a {type(message).__name__}, not a mapping")
            continue
        role = message.get("role")
        if not isinstance(role, str) or not role:
            problems.append(f"messages[{i}] has no role (a non-empty string)")
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if isinstance(content, bytes) or not isinstance(content, Sequence):
            problems.append(
                f"messages[{i}].content must be a string, a list of parts or None,"
                f" not {type(content).__name__}"
            )
        elif not all(isinstance(part, Mapping) for part in content):
            problems.append(f"messages[{i}].content parts must be mappings")
    if problems:
        raise InvalidRequestError("; ".join(problems))


def messages_to_dicts(
    messages: Sequence[TemplateMessage | Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Turn engine ``ChatMessage`` objects (or mappings) into the dicts templates index into.

    Raises ``InvalidRequestError`` for anything that is not a well-formed message.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidRequestError("messages must be a list of messages")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if isinstance(message, TemplateMessage):
            out.append(message.to_template_dict())
        elif isinstance(message, Mapping):
            out.append(dict(message))
        else:
            raise InvalidRequestError(f"messages[{i}] is a {type(message).__name__}, not a message")
    _validate_messages(out)
    return out


def strip_leading_bos(text: str, bos_token: str) -> str:
    """Drop one leading ``bos_token`` from rendered text.

    Many templates print ``bos_token`` themselves while the tokenizer also adds BOS; the engine
    strips the printed one when the vocabulary adds BOS, so the prompt does not start with two.
    """
    if bos_token and text.startswith(bos_token):
        return text[len(bos_token) :]
    return text
