"""The framework-neutral adapter core: what every adapter does, written once.

* ``EngineBinding``: an adapter's engine, made on first use (off the event loop for async
  callers), replaced when closed, with per-call model overrides kept;
* ``CallSite``: a chat adapter's calls prepared one way (options, engine, plan), then run;
* ``CallOptions``: one merge of an adapter's defaults and a call's keywords (``UNSET``: a keyword
  not passed, so ``None`` can mean "none", e.g. ``max_tokens=None`` for no limit);
* ``plan_call`` and ``CallPlan``: plain, structured and tool calls planned and read one way;
* ``generate`` / ``agenerate`` / ``stream`` / ``astream``: run a plan on any
  ``InferenceEngine``, retrying a full queue only before the first token;
* ``EngineSettings`` / ``SamplingSettings`` / ``CallSettings``: the fields adapters expose;
* ``ModelWindow`` / ``estimated_window`` / ``model_display_name``: what one request gets
  (estimated before the engine is loaded), and a model's name;
* ``openai_logprobs``: log-probabilities in OpenAI's shape.

Adapters keep only their framework's side: their fields, message translation, and building
framework objects from ``CallResult`` and ``ToolStreamChunk``.

Example, on an engine directly::

    from llamacpp_integrations.client import generate, structured_plan, tool_plan

    value = generate(engine, structured_plan(request, person_schema)).value
    result = generate(engine, tool_plan(engine, request, [weather_tool]))
    result.content, result.tool_calls
"""

from __future__ import annotations

from .binding import EngineBinding, ModelWindow, estimated_window, model_display_name
from .calls import CallSite, MessagesOf, PreparedCall
from .execute import RetryPolicy, agenerate, astream, generate, stream
from .options import (
    NULLABLE_OPTIONS,
    UNSET,
    CallOptions,
    ResponseFormat,
    Unset,
    defaults_of,
    or_default,
    read_response_format,
)
from .plan import (
    CallPlan,
    CallResult,
    ChunkReader,
    TemplateFacts,
    chat_plan_factory,
    plan_call,
    request_of,
    structured_plan,
    tool_plan,
)
from .results import openai_logprobs
from .settings import (
    CallSettings,
    EngineBound,
    EngineSettings,
    SamplingSettings,
    engine_settings_of,
)

__all__ = [
    "NULLABLE_OPTIONS",
    "UNSET",
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
    "ModelWindow",
    "PreparedCall",
    "ResponseFormat",
    "RetryPolicy",
    "SamplingSettings",
    "TemplateFacts",
    "Unset",
    "agenerate",
    "astream",
    "chat_plan_factory",
    "defaults_of",
    "engine_settings_of",
    "estimated_window",
    "generate",
    "model_display_name",
    "openai_logprobs",
    "or_default",
    "plan_call",
    "read_response_format",
    "request_of",
    "stream",
    "structured_plan",
    "tool_plan",
]
