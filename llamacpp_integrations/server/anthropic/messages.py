"""Anthropic messages to the engine's template shape (OpenAI-style roles, calls and results).

Anthropic puts everything in content blocks: a user turn carries text, images and the
``tool_result`` blocks answering the previous turn's calls; an assistant turn carries text,
``thinking`` and ``tool_use`` blocks. Templates want OpenAI's shape instead, so:

* ``system`` (a string or text blocks, joined with blank lines) becomes a system message;
* a user turn's ``tool_result`` blocks become ``tool`` messages (named after the call they
  answer, which some templates print), in the order given, and its other blocks a user message;
  an error result (``is_error``) reads ``Error: ...``, as the LangChain adapter writes one;
* an assistant turn's ``tool_use`` blocks become its ``tool_calls``, its ``thinking`` blocks its
  ``reasoning_content`` (which templates that show earlier reasoning render), and
  ``redacted_thinking`` is dropped: its text is encrypted by Anthropic and means nothing here;
* images (base64 or URL sources) are read with the reader the client core gives, under the
  server's image policy, as the OpenAI endpoint reads ``image_url`` parts.

A conversation ending with an assistant turn asks Anthropic to continue that turn (prefill);
chat templates cannot continue a turn, so it is refused, as Anthropic refuses it for models
without prefill.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...client.content import template_content
from ...client.plan import ImageReader
from ...errors import ImageInputNotSupportedError
from ...tools import read_tool_calls
from ..errors import ApiError
from .errors import bad_request
from .schemas import AnthropicMessage

__all__ = ["anthropic_messages_reader", "system_text"]

# Assistant blocks left out of the prompt: redacted thinking is encrypted by Anthropic. (Block
# fields such as cache_control and citations are ignored: the engine caches prompts itself.)
_SKIPPED_BLOCKS = frozenset({"redacted_thinking"})


def system_text(system: str | Sequence[Mapping[str, Any]] | None) -> str:
    """The system prompt: the string, or its text blocks joined with blank lines."""
    if system is None or isinstance(system, str):
        return system or ""
    texts = []
    for i, block in enumerate(system):
        if block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise bad_request("system blocks must be text blocks", f"system[{i}]")
        texts.append(block["text"])
    return "\n\n".join(texts)


def anthropic_messages_reader(
    system: str | Sequence[Mapping[str, Any]] | None, messages: Sequence[AnthropicMessage]
) -> Callable[[ImageReader | None], list[dict[str, Any]]]:
    """What translates a body's system prompt and messages into the engine's template shape,
    reading images with the reader the client core gives (``None``: the model takes none)."""
    if messages and messages[-1].role == "assistant":
        raise bad_request(
            "the conversation ends with an assistant turn (prefill), which chat templates "
            "cannot continue: end it with a user turn",
            f"messages[{len(messages) - 1}]",
        )
    prompt = system_text(system)

    def read(read_image: ImageReader | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "system", "content": prompt}] if prompt else []
        names: dict[str, str] = {}  # call id -> tool name, for the results that answer them
        for i, message in enumerate(messages):
            turn = _Turn(f"messages[{i}]", read_image, names)
            out += turn.read(message)
        return out

    return read


class _Turn:
    """One Anthropic turn, read into the template messages it stands for."""

    def __init__(self, param: str, read_image: ImageReader | None, names: dict[str, str]) -> None:
        self.param = param
        self.read_image = read_image
        self.names = names

    def read(self, message: AnthropicMessage) -> list[dict[str, Any]]:
        if isinstance(message.content, str):
            return [{"role": message.role, "content": message.content}]
        if message.role == "assistant":
            return [self._assistant(message.content)]
        return self._user(message.content)

    def _assistant(self, blocks: list[dict[str, Any]]) -> dict[str, Any]:
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(blocks):
            kind, where = block.get("type"), f"{self.param}.content[{j}]"
            if kind == "text":
                texts.append(_text(block, where))
            elif kind == "thinking":
                thoughts.append(str(block.get("thinking") or ""))
            elif kind == "tool_use":
                calls.append(_call(block, where))
            elif kind not in _SKIPPED_BLOCKS:
                raise _unsupported(kind, where, "text, thinking and tool_use")
        item: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
        if thoughts:
            item["reasoning_content"] = "".join(thoughts)
        if calls:
            read = read_tool_calls(calls, where=f"{self.param}.content")
            item["tool_calls"] = [call.to_template() for call in read]
            self.names.update({call.id: call.name for call in read if call.id is not None})
        return item

    def _user(self, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = []
        for j, block in enumerate(blocks):
            kind, where = block.get("type"), f"{self.param}.content[{j}]"
            if kind == "tool_result":
                if parts:  # text before a result stays before it
                    out.append({"role": "user", "content": template_content(parts)})
                    parts = []
                out.append(self._result(block, where))
            elif kind in ("text", "image"):
                parts.append(self._part(block, where))
            else:
                raise _unsupported(kind, where, "text, image and tool_result")
        if parts or not out:
            out.append({"role": "user", "content": template_content(parts)})
        return out

    def _result(self, block: Mapping[str, Any], where: str) -> dict[str, Any]:
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            raise bad_request("a tool_result needs the tool_use_id of its call", where)
        content = block.get("content")
        parts: list[dict[str, Any]]
        if content is None or isinstance(content, str):
            parts = [{"type": "text", "text": content or ""}]
        elif isinstance(content, list):
            parts = []
            for k, inner in enumerate(content):
                inner_where = f"{where}.content[{k}]"
                kind = inner.get("type") if isinstance(inner, Mapping) else None
                if kind not in ("text", "image"):
                    raise _unsupported(kind, inner_where, "text and image")
                parts.append(self._part(inner, inner_where))
        else:
            raise bad_request("content must be a string or a list of blocks", f"{where}.content")
        if block.get("is_error"):
            parts.insert(0, {"type": "text", "text": "Error: "})
        item: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": call_id,
            "content": template_content(parts),
        }
        if call_id in self.names:
            item["name"] = self.names[call_id]
        return item

    def _part(self, block: Mapping[str, Any], where: str) -> dict[str, Any]:
        if block.get("type") == "text":
            return {"type": "text", "text": _text(block, where)}
        if self.read_image is None:
            raise ImageInputNotSupportedError(
                "this model has no image projector (mmproj), so it cannot take image inputs"
            )
        return {"type": "image", "image": self.read_image(_image_source(block, where))}


def _call(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A ``tool_use`` block as the loose OpenAI call ``read_tool_calls`` reads."""
    name, given = block.get("name"), block.get("input")
    if not isinstance(name, str) or not name:
        raise bad_request("a tool_use block needs the name of its tool", f"{where}.name")
    if given is not None and not isinstance(given, Mapping):
        raise bad_request("a tool_use block's input must be an object", f"{where}.input")
    return {"id": block.get("id"), "name": name, "arguments": given}


def _text(block: Mapping[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise bad_request("a text block needs its text (a string)", f"{where}.text")
    return text


def _image_source(block: Mapping[str, Any], where: str) -> str:
    """The data URI or URL an image block's ``source`` gives."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    if kind == "base64" and isinstance(source, Mapping):
        data, media = source.get("data"), source.get("media_type") or "image/png"
        if isinstance(data, str) and data:
            return f"data:{media};base64,{data}"
    elif kind == "url" and isinstance(source, Mapping):
        url = source.get("url")
        if isinstance(url, str) and url:
            return url
    raise bad_request(
        "an image's source must be {'type': 'base64', 'media_type', 'data'} or "
        "{'type': 'url', 'url'} (files uploaded to Anthropic cannot be read here)",
        f"{where}.source",
    )


def _unsupported(kind: object, where: str, supported: str) -> ApiError:
    return bad_request(f"blocks of type {kind!r} are not supported here ({supported} are)", where)
