"""A message's content as the engine's templates take it, from the text and image parts an
adapter read (LangChain's content blocks, Anthropic's, OpenAI's parts).

Text alone becomes one string, which every template renders. With images the parts stay a list,
and each run of adjacent text parts becomes one part, so every image sits between whole texts
(``prompts.media`` later flattens the list around the images' markers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["template_content"]


def template_content(
    parts: Sequence[dict[str, Any]], separator: str = ""
) -> str | list[dict[str, Any]]:
    """``parts`` (``{"type": "text", "text"}`` and ``{"type": "image", "image"}``) as one
    string when all are text, else as parts with adjacent texts merged; ``separator`` goes
    between merged texts."""
    if all(part["type"] == "text" for part in parts):
        return separator.join(part["text"] for part in parts)
    merged: list[dict[str, Any]] = []
    for part in parts:
        if part["type"] == "text" and merged and merged[-1]["type"] == "text":
            text = merged[-1]["text"] + separator + part["text"]
            merged[-1] = {"type": "text", "text": text}
        else:
            merged.append(part)
    return merged
