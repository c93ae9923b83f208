"""The framework-neutral adapter core: what every adapter does, written once.

* ``EngineBinding``: an adapter's engine, made on first use (off the event loop for async
  callers), replaced when closed, with per-call model overrides kept;
* ``CallSite``: a chat adapter's calls prepared one way (options, engine, plan), then run;
* ``CallOptions``: one merge of an adapter's defaults and a call's keywords;
* ``plan_call`` and ``CallPlan``: plain, structured and tool calls planned and read one way;
* ``generate`` / ``agenerate`` / ``stream`` / ``astream``: run a plan on any
  ``InferenceEngine``, retrying a full queue only before the first token;
* ``EngineSettings`` / ``SamplingSettings`` / ``CallSettings``: the fields adapters expose.

Adapters keep only their framework's side: their fields, message translation, and building
framework objects from ``CallResult`` and ``ToolStreamChunk``.

Example, on an engine directly::

    from llamacpp_integrations.client import generate, structured_plan, tool_plan

    value = generate(engine, structured_plan(request, person_schema)).value
    result = generate(engine, tool_plan(engine, request, [weather_tool]))
    result.content, result.tool_calls
"""

from __future__ import annotations

from .binding import EngineBinding
from .calls import CallSite, MessagesOf, PreparedCall
from .execute import RetryPolicy, agenerate, astream, generate, stream
from .options import CallOptions, ResponseFormat, defaults_of, read_response_format
from .plan import (
    CallPlan,
    CallResult,
    ChunkReader,
    chat_plan_factory,
    plan_call,
    request_of,
    structured_plan,
    tool_plan,
)
from .settings import (
    CallSettings,
    EngineBound,
    EngineSettings,
    SamplingSettings,
    engine_settings_of,
)

__all__ = [
    "CallOptions",
    "CallPlan",
    "CallResult",
    "CallSettings",
    "CallSite",
    "ChunkReader",
    "EngineBinding",
    "EngineBound",
    "EngineSettings",
    "MessagesOf",
    "PreparedCall",
    "ResponseFormat",
    "RetryPolicy",
    "SamplingSettings",
    "agenerate",
    "astream",
    "chat_plan_factory",
    "defaults_of",
    "engine_settings_of",
    "generate",
    "plan_call",
    "read_response_format",
    "request_of",
    "stream",
    "structured_plan",
    "tool_plan",
]
