"""``llamacpp-integrations doctor MODEL``: what this package makes of one GGUF, checked.

It loads the model once and runs, with the model's own template or ``--chat-template``, what
the adapters rely on: the template renders (and which conversations it refuses, adapted),
the tool-call style the probes find, a forced call and a structured answer made and read back,
the reasoning format and its switch, whether the prompt starts with two BOS tokens, the
projector, the context and memory the defaults choose, and decode speed. Each finding is
``ok``, ``warn`` (works, with a caveat), ``fail`` or ``info``; the same probes decide what the
LangChain profile and the LlamaIndex metadata say (tool calling, structured output,
reasoning, images and audio).

The machine section (``examine_machine``) says what llama.cpp runs on: its backends and
devices with their free memory, the physical cores, how many layers this engine offloaded, where
its KV cache lives and how big it is, flash attention, and the settings recommended for the
machine (``engine.advice``). The placement is the one the engine put in its ``ModelInfo``,
which the adapters read too.
"""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Literal

from . import client
from .engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    InferenceEngine,
    ReasoningFormat,
    SamplingParams,
)
from .engine.machine import MachineReport
from .engine.native.devices import read_machine
from .engine.sizing import estimated_context
from .errors import LlamaCppIntegrationError
from .models import read_gguf_info
from .prompts.chat_rendering import ChatTemplates
from .prompts.template_caps import NO_POLYFILLS, TemplateCaps
from .tools import TemplateToolSupport, ToolSpec, detect_reasoning, detect_tool_support

__all__ = ["Finding", "diagnose", "examine_machine", "findings_json", "findings_table"]

Status = Literal["ok", "warn", "fail", "info"]

_WEATHER = ToolSpec(
    name="get_weather",
    description="Get the current weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
_PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
_GREEDY = SamplingParams(temperature=0.0)
_NEED_TEMPLATE = frozenset(
    {"tool-call style", "forced call", "structured answer", "reasoning", "BOS", "speed"}
)
_SPEED_TOKENS = 64


class _Probes:
    """The template facts a plan reads, probed afresh (``client.TemplateFacts``)."""

    def tool_support(
        self, engine: InferenceEngine, chat_template: str | None
    ) -> TemplateToolSupport:
        return detect_tool_support(engine, chat_template)

    def reasoning_format(
        self, engine: InferenceEngine, chat_template: str | None
    ) -> ReasoningFormat | None:
        return detect_reasoning(engine, chat_template)


_PROBES = _Probes()


@dataclass(frozen=True)
class Finding:
    """One check's result: what was checked, how it went, and what was seen."""

    check: str
    status: Status
    detail: str


def _chat(text: str, template: str | None, max_tokens: int) -> ChatRequest:
    return ChatRequest(
        messages=[
            ChatMessage(role="system", content="You are a helpful assistant."),
            ChatMessage(role="user", content=text),
        ],
        chat_template=template,
        max_tokens=max_tokens,
        sampling=_GREEDY,
    )


def _adapted(caps: TemplateCaps) -> list[str]:
    """The names of the polyfills a template needs (see ``prompts.template_caps``)."""
    return [
        f.name
        for f in fields(TemplateCaps)
        if getattr(caps, f.name) != getattr(NO_POLYFILLS, f.name)
    ]


def _template(engine: Engine, template: str | None) -> Finding:
    source = template or engine.info.chat_template
    if source is None:
        return Finding("template", "fail", "the GGUF has none: pass --chat-template")
    origin = "--chat-template" if template else "the GGUF's own"
    engine.render_chat(_chat("Hello.", template, 1))  # raises ChatTemplateError when it fails
    compiled = ChatTemplates(None).template_for(_chat("Hello.", source, 1))
    adapted = _adapted(compiled.caps)
    if adapted:
        return Finding("template", "warn", f"{origin}; adapted where it refuses: {adapted}")
    return Finding("template", "ok", f"{origin}; renders every probed conversation as given")


def _tool_style(engine: Engine, template: str | None) -> Finding:
    support = detect_tool_support(engine, template)
    if support.syntax is not None:
        return Finding("tool-call style", "ok", f"native: {support.syntax.name}")
    shown = [
        name
        for name, seen in (
            ("tools", support.renders_tools),
            ("calls", support.renders_tool_calls),
            ("results", support.renders_tool_results),
        )
        if seen
    ]
    where = f"the template renders {', '.join(shown)}" if shown else "the template knows no tools"
    return Finding("tool-call style", "info", f"the package's own prompt ({where})")


def _forced_call(engine: Engine, template: str | None, max_tokens: int) -> Finding:
    options = client.CallOptions.merge(
        {},
        {"tools": [_WEATHER.to_openai()], "tool_choice": _WEATHER.name, "max_tokens": max_tokens},
        owner="doctor",
    )
    request = _chat("What is the weather in Paris?", template, max_tokens)
    plan = client.plan_call(engine, request, options, _PROBES)
    result = client.generate(engine, plan)
    calls = result.tool_calls
    if len(calls) == 1 and calls[0].name == _WEATHER.name and "city" in calls[0].arguments:
        return Finding("forced call", "ok", f"get_weather({json.dumps(calls[0].arguments)})")
    return Finding("forced call", "fail", f"got {calls!r} and text {result.content[:80]!r}")


def _structured(engine: Engine, template: str | None, max_tokens: int) -> Finding:
    options = client.CallOptions.merge(
        {},
        {
            "response_format": {"type": "json_schema", "json_schema": {"schema": _PERSON}},
            "max_tokens": max_tokens,
        },
        owner="doctor",
    )
    request = _chat("Alice is 31. Extract the person as JSON.", template, max_tokens)
    plan = client.plan_call(engine, request, options, _PROBES)
    value = client.generate(engine, plan).value
    if isinstance(value, dict) and isinstance(value.get("age"), int):
        return Finding("structured answer", "ok", json.dumps(value))
    return Finding("structured answer", "fail", f"got {value!r}")


def _reasoning(engine: Engine, template: str | None) -> Finding:
    format = detect_reasoning(engine, template)
    if format is None:
        return Finding("reasoning", "info", "no reasoning format: answers are not split")
    switch = (
        f"switch {format.switch!r}, {'on' if format.default_on else 'off'} by default"
        if format.switch
        else "no switch (thinking cannot be turned off)"
    )
    opens = "; the prompt opens the thinking" if format.starts_inside else ""
    return Finding(
        "reasoning", "ok", f"{format.family} {format.start}...{format.end}; {switch}{opens}"
    )


def _bos(engine: Engine, template: str | None) -> Finding:
    bos = engine.tokenize("", add_special=True)
    tokens = engine.prompt_tokens(_chat("Hello.", template, 1))
    if not bos:
        return Finding("BOS", "ok", "the vocabulary adds no BOS")
    if tokens[: 2 * len(bos)] == bos * 2:
        return Finding("BOS", "fail", "the prompt starts with two BOS tokens")
    return Finding("BOS", "ok", "one BOS (a BOS the template prints is dropped)")


def _projector(engine: Engine) -> Finding:
    if engine.info.mmproj is None:
        return Finding(
            "media", "info", "no projector: text only (pass --mmproj for images or audio)"
        )
    reads = [
        *(["images"] if engine.info.supports_images else []),
        *([f"audio at {engine.info.audio_sample_rate} Hz"] if engine.info.supports_audio else []),
    ]
    return Finding("media", "ok", f"projector {engine.info.mmproj} ({', '.join(reads)})")


def _context(engine: Engine) -> Finding:
    """What a ``ChatLlamaCpp(model=...)`` with no settings would choose for this model on this
    machine, now (the doctor's own engine runs one sequence)."""
    choice = estimated_context(
        EngineConfig(model=engine.info.path), read_gguf_info(engine.info.path)
    )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return Finding(
        "context and memory",
        "info",
        f"by default {choice.describe()}; this check's peak RSS {rss:.0f} MiB",
    )


def _speed(engine: Engine, template: str | None) -> Finding:
    request = _chat("Write a short story about a lighthouse.", template, _SPEED_TOKENS)
    request = replace(request, ignore_eos=True)
    start = time.perf_counter()
    completion = engine.generate(request)
    seconds = time.perf_counter() - start
    n = completion.usage.completion_tokens
    return Finding("speed", "info", f"{n / seconds:.1f} tokens/s (one request, {n} tokens)")


def diagnose(
    engine: Engine, chat_template: str | None = None, *, max_tokens: int = 128
) -> list[Finding]:
    """Every check on ``engine``'s model with ``chat_template`` (``None``: the model's own).

    A check that raises one of the package's errors is reported as failed; the others go on.
    """
    checks: list[tuple[str, Callable[[], Finding]]] = [
        ("template", lambda: _template(engine, chat_template)),
        ("tool-call style", lambda: _tool_style(engine, chat_template)),
        ("forced call", lambda: _forced_call(engine, chat_template, max_tokens)),
        ("structured answer", lambda: _structured(engine, chat_template, max_tokens)),
        ("reasoning", lambda: _reasoning(engine, chat_template)),
        ("BOS", lambda: _bos(engine, chat_template)),
        ("media", lambda: _projector(engine)),
        ("context and memory", lambda: _context(engine)),
        ("speed", lambda: _speed(engine, chat_template)),
    ]
    findings: list[Finding] = []
    for name, check in checks:
        if findings and findings[0].status == "fail" and name in _NEED_TEMPLATE:
            continue  # without a template they would all fail the same way
        try:
            findings.append(check())
        except LlamaCppIntegrationError as exc:
            findings.append(Finding(name, "fail", f"{type(exc).__name__}: {exc}"))
    return findings


def examine_machine(engine: Engine) -> MachineReport:
    """The machine section: llama.cpp's backends and devices now, and where ``engine`` put its
    model, with the settings recommended for this machine."""
    return read_machine(engine.config, engine.info)


def findings_table(findings: list[Finding], machine: MachineReport | None = None) -> str:
    """The findings as an aligned text table, then the machine section when given."""
    width = max(len(f.check) for f in findings)
    lines = [f"{f.check:<{width}}  {f.status:<4}  {f.detail}" for f in findings]
    if machine is not None:
        rows = machine.rows()
        label = max(len(name) for name, _ in rows)
        lines += ["", "machine"]
        lines += [f"  {name:<{label}}  {text}" for name, text in rows]
    return "\n".join(lines)


def findings_json(findings: list[Finding], machine: MachineReport | None = None) -> str:
    """The findings as a JSON list of objects (``check``, ``status``, ``detail``); with the
    machine section, an object holding that list as ``findings`` and the section as
    ``machine``."""
    listed = [asdict(f) for f in findings]
    if machine is None:
        return json.dumps(listed, indent=2)
    return json.dumps({"findings": listed, "machine": asdict(machine)}, indent=2)
