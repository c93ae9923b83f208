"""What a chat template accepts, found by rendering small probe conversations.

Published templates disagree about the conversations they take: Gemma 2's refuses a system
message, Mistral's refuse two user turns in a row (even with tool results between them),
functionary's concatenates tool-call arguments to text and so needs them as a JSON string,
Command R+'s needs every tool parameter described. ``probe_caps`` finds each of these once per
compiled template by rendering probes, never by the template's name. A capability counts as
missing only when the template refuses the usual shape *and* renders the adapted one
(``polyfills``): so a template that takes everything is marked as needing nothing, and its
prompts stay exactly what it renders by itself. Refusing is raising, or, for the system
message, typed content, arguments and tool results, leaving the probe's text out (the template
would lose it); a template that raises on a turn order refuses that order, while one that shows
only some turns may mean to.

All the probes of a template share one time budget (its render time limit): a template that
loops forever costs one limit of probing, not one per probe, and whatever was not probed in
time is taken as accepted (nothing adapted).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["BRIDGES", "NO_POLYFILLS", "ProbeRender", "TemplateCaps", "probe_caps"]

BRIDGES = ("", " ")
"""The assistant turns tried, in order, between tool results and the next user turn for a
template that wants an answer there: empty first (what a model that said nothing wrote), a
space for templates that refuse empty turns (Ministral 3's)."""


@dataclass(frozen=True)
class TemplateCaps:
    """What a template refuses, each with the polyfill that adapts it (see ``polyfills``).

    Attributes:
        system_role: It renders a system message (else the system text is folded into the
            user turn that follows it).
        typed_content: It renders content only as a list of parts (else strings are given).
        string_arguments: It needs tool-call arguments as a JSON string, not an object.
        tool_role: It renders tool results (else they become user turns).
        strict_alternation: It refuses two turns of one role in a row (they are merged).
        tool_answer_bridge: The assistant turn put between tool results and a user turn that
            follows them, for a template that refuses them side by side (``None``: none
            needed, or none helps).
        described_parameters: It needs a description on every tool parameter (an empty one
            is given where missing).
    """

    system_role: bool = True
    typed_content: bool = False
    string_arguments: bool = False
    tool_role: bool = True
    strict_alternation: bool = False
    tool_answer_bridge: str | None = None
    described_parameters: bool = False


NO_POLYFILLS = TemplateCaps()
"""The capabilities of a template that accepts every probe."""


class ProbeRender(Protocol):
    """Renders messages (and tools) exactly as given within ``time_limit`` seconds, raising
    when the template fails."""

    def __call__(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        time_limit: float,
    ) -> str: ...


# -- probe conversations -----------------------------------------------------------------------

_SYSTEM = "cap_probe_system_s4"
_USER = "cap_probe_user_u7"
_OTHER_USER = "cap_probe_user_w2"
_ANSWER = "cap_probe_answer_a5"
_ARGUMENT = "cap_probe_value_v3"
_RESULT = "cap_probe_result_r8"
_TOOL = "cap_probe_tool"
_CALL_ID = "c4pPr0be1"  # nine alphanumerics: Mistral templates refuse other ids


def _tool(parameter: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": _TOOL,
            "description": "Probe tool.",
            "parameters": {
                "type": "object",
                "properties": {"probe_arg": dict(parameter)},
                "required": ["probe_arg"],
            },
        },
    }


_DESCRIBED_TOOLS = [_tool({"type": "string", "description": "Probe argument."})]


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _calling(string_arguments: bool) -> dict[str, Any]:
    arguments: Any = {"probe_arg": _ARGUMENT}
    if string_arguments:
        arguments = json.dumps(arguments)
    call = {"id": _CALL_ID, "type": "function", "function": {"name": _TOOL, "arguments": arguments}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


_RESULT_MESSAGE = {"role": "tool", "tool_call_id": _CALL_ID, "name": _TOOL, "content": _RESULT}


class _Prober:
    def __init__(self, render: ProbeRender, budget: float) -> None:
        self._render = render
        self._deadline = time.monotonic() + budget

    def shows(
        self,
        messages: Sequence[Mapping[str, Any]],
        *needles: str,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> bool:
        """Whether ``messages`` render, and every needle appears in what they render to
        (``False`` once the budget is spent: the usual shape and the adapted one alike)."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            text = self._render(messages, tools, time_limit=left)
        except Exception:  # a refusal, whatever the template raised
            return False
        return all(needle in text for needle in needles)

    def renders(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
    ) -> bool:
        """Whether ``messages`` render at all (what they show aside)."""
        return self.shows(messages, tools=tools)

    def system_role(self) -> bool:
        usual = [{"role": "system", "content": _SYSTEM}, _user(_USER)]
        folded = [_user(f"{_SYSTEM}\n\n{_USER}")]
        return self.shows(usual, _SYSTEM, _USER) or not self.shows(folded, _SYSTEM, _USER)

    def typed_content(self) -> bool:
        typed = [{"role": "user", "content": [{"type": "text", "text": _USER}]}]
        return not self.shows([_user(_USER)], _USER) and self.shows(typed, _USER)

    def string_arguments(self) -> bool:
        usual = [_user(_USER), _calling(False)]
        strung = [_user(_USER), _calling(True)]
        tools = _DESCRIBED_TOOLS
        return not self.shows(usual, _ARGUMENT, tools=tools) and self.shows(
            strung, _ARGUMENT, tools=tools
        )

    def tool_role(self, string_arguments: bool) -> bool:
        calling = _calling(string_arguments)
        usual = [_user(_USER), calling, _RESULT_MESSAGE]
        as_user = [_user(_USER), calling, _user(_RESULT)]
        tools = _DESCRIBED_TOOLS
        return self.shows(usual, _RESULT, tools=tools) or not self.shows(
            as_user, _RESULT, tools=tools
        )

    def strict_alternation(self) -> bool:
        merged = [_user(f"{_USER}\n\n{_OTHER_USER}")]
        # Raising, not dropping a turn: a template may mean to show only some turns.
        return not self.renders([_user(_USER), _user(_OTHER_USER)], None) and (
            self.shows(merged, _USER, _OTHER_USER)
        )

    def tool_answer_bridge(self, string_arguments: bool) -> str | None:
        head = [_user(_USER), _calling(string_arguments), _RESULT_MESSAGE]
        tools = _DESCRIBED_TOOLS
        if self.renders([*head, _user(_OTHER_USER)], tools):
            return None
        for bridge in BRIDGES:
            bridged = [*head, {"role": "assistant", "content": bridge}, _user(_OTHER_USER)]
            if self.shows(bridged, _RESULT, _OTHER_USER, tools=tools):
                return bridge
        return None

    def described_parameters(self) -> bool:
        bare = [_tool({"type": "string"})]
        described = [_tool({"type": "string", "description": ""})]
        return not self.shows([_user(_USER)], _TOOL, tools=bare) and self.shows(
            [_user(_USER)], _TOOL, tools=described
        )


def probe_caps(render: ProbeRender, budget: float) -> TemplateCaps:
    """The capabilities of the template ``render`` renders with: a dozen small renders, in
    ``budget`` seconds at most."""
    probe = _Prober(render, budget)
    string_arguments = probe.string_arguments()
    tool_role = probe.tool_role(string_arguments)
    return TemplateCaps(
        system_role=probe.system_role(),
        typed_content=probe.typed_content(),
        string_arguments=string_arguments,
        tool_role=tool_role,
        strict_alternation=probe.strict_alternation(),
        tool_answer_bridge=probe.tool_answer_bridge(string_arguments) if tool_role else None,
        described_parameters=probe.described_parameters(),
    )
