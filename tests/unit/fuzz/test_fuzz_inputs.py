"""Fuzzing what callers hand in: both frameworks' messages (every block type, nesting, wrong
types) and image bytes (random and mutated, every allowed format) and image URLs. Only the
package's typed errors may come out."""

from __future__ import annotations

import base64
import contextlib
import io
import ipaddress
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from PIL import Image

from llamacpp_integrations.errors import ImageLoadError, LlamaCppIntegrationError
from llamacpp_integrations.multimodal import ImagePolicy, load_image
from llamacpp_integrations.multimodal.targets import address_problem
from llamacpp_integrations.prompts.chat_template import messages_to_dicts

FORMATS = ["PNG", "JPEG", "WEBP", "GIF", "BMP"]


def _encoded(fmt: str, size: tuple[int, int] = (7, 5)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(out, format=fmt)
    return out.getvalue()


SAMPLES = {fmt: _encoded(fmt) for fmt in FORMATS}
SMALL = ImagePolicy(max_pixels=4096 * 4096)


def read_image(source: Any) -> Any:
    return load_image(source, SMALL)


# ---- image bytes --------------------------------------------------------------------------


@st.composite
def mutated_images(draw: st.DrawFn) -> bytes:
    data = bytearray(SAMPLES[draw(st.sampled_from(FORMATS))])
    for _ in range(draw(st.integers(0, 8))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "dims"]))
        if op == "flip" and data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            data = data[: draw(st.integers(0, len(data)))]
        elif op == "insert":
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(max_size=16))
        elif op == "dims" and len(data) > 24:
            # Header fields that hold sizes sit early in every format: make them huge.
            at = draw(st.integers(0, 23))
            data[at : at + 4] = b"\xff\xff\xff\x7f"
    return bytes(data)


@given(data=mutated_images() | st.binary(max_size=256))
def test_fuzz_image_bytes(data: bytes) -> None:
    try:
        image = load_image(data, SMALL)
    except ImageLoadError:
        return
    assert image.width * image.height * 3 == len(image.rgb)


@given(data=mutated_images(), prefix=st.sampled_from(["data:image/png;base64,", "", "data:,"]))
def test_fuzz_image_data_uris(data: bytes, prefix: str) -> None:
    with contextlib.suppress(ImageLoadError):
        load_image(prefix + base64.b64encode(data).decode(), SMALL)


@given(text=st.text(max_size=80))
def test_fuzz_image_sources_as_text(text: str) -> None:
    """Any string: a URL, a path, base64 or garbage. The default policy fetches nothing and
    reads no file, so each is refused or decoded, typed."""
    with contextlib.suppress(ImageLoadError):
        load_image(text)


# ---- image URL addresses ------------------------------------------------------------------


@given(v4=st.integers(0, 2**32 - 1))
def test_fuzz_ipv4_mapped_addresses_are_judged_as_their_ipv4(v4: int) -> None:
    """``::ffff:a.b.c.d`` (and the NAT64 and 6to4 forms) can never be a way around a refusal
    of ``a.b.c.d``."""
    plain = ipaddress.IPv4Address(v4)
    mapped = ipaddress.IPv6Address(f"::ffff:{plain}")
    for allow_private in (False, True):
        if address_problem(plain, allow_private=allow_private) is not None:
            assert address_problem(mapped, allow_private=allow_private) is not None


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "::ffff:127.0.0.1", "::ffff:7f00:1", "::1", "0.0.0.0", "::ffff:0.0.0.0"],
)
def test_loopback_forms_are_refused(host: str) -> None:
    assert address_problem(ipaddress.ip_address(host), allow_private=False) is not None


# ---- messages of both frameworks ----------------------------------------------------------

texts = st.text(max_size=12)
wrong = st.none() | st.integers() | st.floats() | st.binary(max_size=4) | st.lists(st.integers())
image_values = (
    st.sampled_from([base64.b64encode(SAMPLES[f]).decode() for f in FORMATS])
    | st.just("http://127.0.0.1/a.png")
    | st.just("file:///etc/passwd")
    | texts
)


def lc_blocks() -> st.SearchStrategy[Any]:
    block = st.one_of(
        texts,
        st.fixed_dictionaries({"type": st.just("text"), "text": texts | wrong}),
        st.fixed_dictionaries(
            {
                "type": st.just("image_url"),
                "image_url": st.fixed_dictionaries({"url": image_values}),
            }
        ),
        st.fixed_dictionaries({"type": st.just("image_url"), "image_url": image_values | wrong}),
        st.fixed_dictionaries(
            {
                "type": st.just("image"),
                "source_type": st.sampled_from(["base64", "url", "id"]),
                "data": image_values,
                "mime_type": st.sampled_from(["image/png", "image/jpeg", "text/plain"]),
            }
        ),
        st.fixed_dictionaries(
            {"type": st.just("image"), "base64": image_values, "url": image_values}
        ),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["audio", "file", "video", "reasoning", "tool_use", "x"])}
        ),
        st.dictionaries(texts, texts | wrong, max_size=3),
    )
    return st.lists(block, max_size=4)


@given(
    kinds=st.lists(
        st.sampled_from(["human", "ai", "system", "tool", "chat"]), min_size=1, max_size=4
    ),
    data=st.data(),
)
def test_fuzz_langchain_messages(kinds: list[str], data: st.DataObject) -> None:
    from langchain_core.messages import (
        AIMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )

    from llamacpp_integrations.langchain.messages import to_engine_messages

    messages: list[Any] = []
    for kind in kinds:
        content = data.draw(texts | lc_blocks())
        try:
            if kind == "human":
                messages.append(HumanMessage(content=content))
            elif kind == "system":
                messages.append(SystemMessage(content=content))
            elif kind == "tool":
                messages.append(ToolMessage(content=content, tool_call_id=data.draw(texts)))
            elif kind == "chat":
                messages.append(ChatMessage(content=content, role=data.draw(texts)))
            else:
                calls = data.draw(
                    st.lists(
                        st.fixed_dictionaries(
                            {
                                "name": texts,
                                "args": st.dictionaries(texts, texts, max_size=2),
                                "id": texts | st.none(),
                            }
                        ),
                        max_size=2,
                    )
                )
                messages.append(AIMessage(content=content, tool_calls=calls))
        except (ValueError, TypeError):  # the framework's own validation refused it
            assume(False)
    reader = data.draw(st.sampled_from([None, read_image]))
    try:
        converted = to_engine_messages(messages, reader)
        messages_to_dicts(converted)
    except LlamaCppIntegrationError:
        pass


def li_blocks() -> st.SearchStrategy[Any]:
    from llama_index.core.base.llms.types import (
        AudioBlock,
        DocumentBlock,
        ImageBlock,
        TextBlock,
        ThinkingBlock,
    )

    def build(cls: Any, **kwargs: Any) -> Any:
        try:
            return cls(**kwargs)
        except (ValueError, TypeError):
            return TextBlock(text="")

    return st.one_of(
        texts.map(lambda t: TextBlock(text=t)),
        st.sampled_from(list(SAMPLES.values())).map(lambda b: build(ImageBlock, image=b)),
        mutated_images().map(lambda b: build(ImageBlock, image=b)),
        image_values.map(lambda u: build(ImageBlock, url=u)),
        st.just(build(ImageBlock, path="/etc/passwd")),
        st.just(build(AudioBlock, audio=b"RIFF")),
        st.just(build(DocumentBlock, data=b"%PDF")),
        texts.map(lambda t: build(ThinkingBlock, content=t)),
    )


@given(data=st.data())
def test_fuzz_llama_index_messages(data: st.DataObject) -> None:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    from llamacpp_integrations.llama_index.messages import to_engine_messages

    messages = []
    for _ in range(data.draw(st.integers(1, 3))):
        role = data.draw(st.sampled_from(list(MessageRole)))
        blocks = data.draw(st.lists(li_blocks(), max_size=4))
        try:
            messages.append(ChatMessage(role=role, blocks=blocks))
        except (ValueError, TypeError):
            assume(False)
    reader = data.draw(st.sampled_from([None, read_image]))
    try:
        converted = to_engine_messages(messages, reader)
        messages_to_dicts(converted)
    except LlamaCppIntegrationError:
        pass


@given(
    messages=st.lists(
        st.dictionaries(
            st.sampled_from(["role", "content", "tool_calls", "name"]),
            texts | wrong | st.lists(st.dictionaries(texts, texts | wrong, max_size=2), max_size=2),
            max_size=4,
        ),
        max_size=3,
    )
    | wrong
)
def test_fuzz_engine_message_dicts(messages: Any) -> None:
    with contextlib.suppress(LlamaCppIntegrationError):
        messages_to_dicts(messages)
