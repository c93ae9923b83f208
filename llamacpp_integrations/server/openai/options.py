"""OpenAI request bodies to the client core's calls: options, messages and images.

The chat endpoint builds its plan the way the framework adapters do (``client.CallOptions``
then ``client.chat_plan_factory``), so tools, every ``tool_choice`` (a named function enforced
by grammar), ``response_format`` and reasoning behave exactly as they do in LangChain and
LlamaIndex. Images in ``image_url`` parts are read under the server's ``ImagePolicy``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from ...client import CallOptions
from ...engine import CompletionRequest, ImageInput, SamplingParams
from ...errors import ImageInputNotSupportedError, InvalidRequestError, UnsupportedContentError
from ...tools import read_tool_calls
from ..errors import ApiError
from .field_policy import CHAT_REFUSED, COMPLETION_REFUSED, refuse_unhonoured
from .schemas import ChatCompletionBody, CompletionBody, SamplingFields

__all__ = ["chat_options", "completion_options", "completion_request", "messages_reader"]

_SAMPLING = tuple(f.name for f in fields(SamplingParams))
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_ROLES |= {"tool": "tool", "function": "tool"}

ImageReader = Callable[[Any], ImageInput]


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", "invalid_request", param)


def _given(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords a body gave: a field left out of the body is ``None`` here, and a call
    reads ``None`` as "none" (``max_tokens=None``: no limit), so it is not passed at all and
    the default applies."""
    return {name: value for name, value in kwargs.items() if value is not None}


def _common(body: SamplingFields, timeout: float | None) -> dict[str, Any]:
    """The call keywords both generation endpoints share (``n`` is not one: each of ``n``
    answers is a call of its own, see ``choices``)."""
    bias: dict[int, float] | None = None
    if body.logit_bias:
        try:
            bias = {int(token): value for token, value in body.logit_bias.items()}
        except ValueError:
            raise _bad("logit_bias keys must be token ids", "logit_bias") from None
    kwargs: dict[str, Any] = {name: getattr(body, name, None) for name in _SAMPLING}
    kwargs |= {"logit_bias": bias, "stop": body.stop, "timeout": timeout, "grammar": body.grammar}
    return kwargs


def chat_options(body: ChatCompletionBody, *, timeout: float | None) -> CallOptions:
    """The call options of a chat completion request.

    Raises:
        ApiError: a field this server cannot honour.
        InvalidRequestError: options that contradict each other (tools with a response format).
    """
    refuse_unhonoured(body.model_extra, CHAT_REFUSED)
    kwargs = _common(body, timeout)
    kwargs["max_tokens"] = body.max_completion_tokens or body.max_tokens
    kwargs |= {
        "logprobs": body.logprobs,
        "top_logprobs": body.top_logprobs,
        "reasoning": body.reasoning,
        "reasoning_budget": body.reasoning_budget,
    }
    if body.response_format is not None and body.response_format.get("type") != "text":
        kwargs["response_format"] = body.response_format
    if body.tools:
        kwargs["tools"] = body.tools
        kwargs["tool_choice"] = body.tool_choice
        if body.parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = body.parallel_tool_calls
    elif body.tool_choice not in (None, "none", "auto"):
        raise _bad("tool_choice needs tools", "tool_choice")
    return CallOptions.merge({}, _given(kwargs), owner="POST /v1/chat/completions")


def completion_options(body: CompletionBody, *, timeout: float | None) -> CallOptions:
    """The call options of a legacy completion request."""
    refuse_unhonoured(body.model_extra, COMPLETION_REFUSED)
    if body.echo:
        raise _bad("echo is not supported", "echo")
    if body.suffix:
        raise _bad("suffix is not supported", "suffix")
    kwargs = _common(body, timeout)
    kwargs |= {"max_tokens": body.max_tokens}
    if body.logprobs is not None:
        kwargs |= {"logprobs": True, "top_logprobs": body.logprobs}
    return CallOptions.merge({}, _given(kwargs), owner="POST /v1/completions", chat=False)


def completion_request(body: CompletionBody, options: CallOptions) -> CompletionRequest:
    """The engine request of a legacy completion: one prompt, text or token ids."""
    prompt: str | list[int]
    if isinstance(body.prompt, str):
        prompt = body.prompt
    elif body.prompt and all(isinstance(p, int) for p in body.prompt):
        prompt = [int(p) for p in body.prompt]
    elif len(body.prompt) == 1 and isinstance(body.prompt[0], str):
        prompt = body.prompt[0]
    else:
        raise _bad("prompt must be one string (or one list of token ids)", "prompt")
    return CompletionRequest(
        prompt=prompt,
        sampling=options.sampling,
        max_tokens=options.max_tokens,
        stop=options.stop,
        timeout=options.timeout,
        logprobs=options.logprobs,
        grammar=options.grammar,
    )


def messages_reader(
    messages: Sequence[Mapping[str, Any]],
) -> Callable[[ImageReader | None], list[dict[str, Any]]]:
    """What translates OpenAI messages into the engine's template shape, reading images with
    the reader the client core gives (``None``: the model takes no images)."""

    def read(read_image: ImageReader | None) -> list[dict[str, Any]]:
        return [_message(m, i, read_image) for i, m in enumerate(messages)]

    return read


def _message(
    message: Mapping[str, Any], index: int, read_image: ImageReader | None
) -> dict[str, Any]:
    param = f"messages[{index}]"
    role = _ROLES.get(str(message.get("role")))
    if role is None:
        raise _bad(f"{param}.role {message.get('role')!r} is not a chat role", f"{param}.role")
    item: dict[str, Any] = {
        "role": role,
        "content": _content(message.get("content"), role, param, read_image),
    }
    name = message.get("name")
    if isinstance(name, str) and name:
        item["name"] = name
    reasoning = message.get("reasoning_content")
    if role == "assistant" and isinstance(reasoning, str) and reasoning:
        item["reasoning_content"] = reasoning
    calls = message.get("tool_calls")
    if role == "assistant" and calls:
        # Earlier answers' calls, arguments as objects (templates print them so).
        given = read_tool_calls(calls, where=f"{param}.tool_calls")
        item["tool_calls"] = [call.to_template() for call in given]
    if role == "tool":
        call_id = message.get("tool_call_id")
        if isinstance(call_id, str):
            item["tool_call_id"] = call_id
    return item


def _content(
    content: object, role: str, param: str, read_image: ImageReader | None
) -> str | list[dict[str, Any]]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{param}.content must be a string or a list of parts", f"{param}.content")
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "image_url" and role == "user":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, Mapping) else url
            if not isinstance(url, str) or not url:
                raise _bad(f"{param}.content[{i}] names no image URL", f"{param}.content")
            if read_image is None:
                raise ImageInputNotSupportedError(
                    "this model has no image projector (mmproj), so it cannot take image inputs"
                )
            parts.append({"type": "image", "image": read_image(url)})
        elif kind == "refusal" and role == "assistant":
            continue
        elif kind is None:
            raise InvalidRequestError(f"{param}.content[{i}] has no type")
        else:
            raise UnsupportedContentError(
                f"{param}.content[{i}]: parts of type {kind!r} are not supported (text, and "
                "image_url in user messages, are)"
            )
    if any(part["type"] == "image" for part in parts):
        return parts
    return "".join(part["text"] for part in parts)
