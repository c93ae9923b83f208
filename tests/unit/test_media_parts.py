"""Content parts flattened for chat templates, images found and marked (no model needed)."""

from __future__ import annotations

import pytest

from llamacpp_integrations.engine import ChatMessage, ChatRequest, CompletionRequest, ImageInput
from llamacpp_integrations.errors import InvalidRequestError, UnsupportedContentError
from llamacpp_integrations.prompts.media import flatten_parts

PIXELS = ImageInput(2, 1, bytes(6))
MARK = "<__m__>"


def test_text_only_part_lists_become_strings_and_others_stay() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "user", "content": "plain"},
        {"role": "user", "content": [{"type": "tool_use", "id": "x"}]},
    ]
    out, images = flatten_parts(messages, None)
    assert [m["content"] for m in out] == ["a\nb", "plain", [{"type": "tool_use", "id": "x"}]]
    assert images == []


def test_images_become_markers_in_order() -> None:
    other = ImageInput(1, 1, b"\1\2\3")
    messages = [
        {
            "role": "user",
            "content": [{"type": "image", "image": PIXELS}, {"type": "text", "text": "x"}],
        },
        {"role": "tool", "content": [{"type": "image", "image": other}]},
    ]
    out, images = flatten_parts(messages, MARK)
    assert [m["content"] for m in out] == [f"{MARK}\nx", MARK]
    assert images == [PIXELS, other]


def test_marker_in_user_text_and_mixed_parts_are_refused() -> None:
    with pytest.raises(InvalidRequestError, match="media marker"):
        flatten_parts([{"role": "user", "content": [{"type": "text", "text": MARK}]}], MARK)
    mixed = [{"type": "image", "image": PIXELS}, {"type": "file", "data": "x"}]
    with pytest.raises(UnsupportedContentError, match="file"):
        flatten_parts([{"role": "user", "content": mixed}], MARK)
    # An audio part is media like an image, and must hold a checked clip.
    raw_audio = [{"type": "image", "image": PIXELS}, {"type": "audio", "data": "x"}]
    with pytest.raises(InvalidRequestError, match="AudioInput"):
        flatten_parts([{"role": "user", "content": raw_audio}], MARK)
    with pytest.raises(InvalidRequestError, match="decoded pixels"):
        flatten_parts([{"role": "user", "content": [{"type": "image", "image": "a.png"}]}], MARK)


def test_has_images_and_image_inputs() -> None:
    chat = ChatRequest(
        messages=[ChatMessage(role="user", content=[{"type": "image", "image": PIXELS}])]
    )
    assert chat.has_images()
    assert not ChatRequest(messages=[{"role": "user", "content": "hi"}]).has_images()
    assert CompletionRequest(prompt="x", images=[PIXELS]).has_images()

    with pytest.raises(InvalidRequestError, match="bytes of pixels"):
        ImageInput(2, 2, bytes(6))
    with pytest.raises(InvalidRequestError, match="empty"):
        ImageInput(0, 2, b"")
