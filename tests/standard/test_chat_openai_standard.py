"""LangChain's standard chat model integration suite through ``langchain_openai.ChatOpenAI``,
pointed at this package's OpenAI-compatible server (``base_url=<server>/v1``) over SmolLM2-135M.

It checks the server from the side of the most used OpenAI client in LangChain: messages,
streaming with usage, tool calls under every ``tool_choice``, structured output (JSON schema
by grammar), JSON mode, stop sequences, cached prompt tokens. Capability flags say what the
server truly supports; tests that fail only because a 135M model answers wrongly are xfailed
with the reason, every other failure is a bug.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI
from langchain_tests.integration_tests import ChatModelIntegrationTests

from llamacpp_integrations.engine.engine import Engine
from tests.integration.serve_helpers import running_server

# Enough for a call or a small structured answer; greedy, so runs are reproducible.
MAX_TOKENS = 64
# Plain chats show what they test in a few tokens, and the tiny model would otherwise ramble
# on to the limit in every one of them (most of the suite's time).
PLAIN_MAX_TOKENS = 16
NEEDS_ROOM = ("tool", "structured", "json", "agent")
"""Words in the names of the tests whose answers are calls or JSON, which get ``MAX_TOKENS``."""
WEAK_MODEL = "SmolLM2-135M answers wrongly; the server's own guarantee holds"


@pytest.fixture(scope="module")
def server(engine: Engine) -> Iterator[str]:
    """The server over the session's SmolLM2 engine, for the whole module."""
    with running_server(engine) as url:
        yield url


class TestChatOpenAIOnOurServer(ChatModelIntegrationTests):
    @pytest.fixture(autouse=True)
    def _per_test(self, server: str, request: pytest.FixtureRequest) -> None:
        self._server = server
        room = any(word in request.node.name for word in NEEDS_ROOM)
        self._max_tokens = MAX_TOKENS if room else PLAIN_MAX_TOKENS

    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return ChatOpenAI

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {
            "base_url": f"{getattr(self, '_server', 'http://unset')}/v1",
            "api_key": "unused",
            "model": "smollm2-135m",
            "temperature": 0.0,
            "max_tokens": getattr(self, "_max_tokens", MAX_TOKENS),
            "max_retries": 0,
            "timeout": 120,
            "stream_usage": True,
            # A client of its own per model: ChatOpenAI's shared async client would outlive
            # the event loop of the test that made it (each async test runs on a new loop).
            "http_async_client": httpx.AsyncClient(timeout=120),
        }

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def returns_usage_metadata(self) -> bool:
        return True

    @property
    def supported_usage_metadata_details(self) -> dict[str, Any]:
        return {"invoke": ["cache_read_input"], "stream": ["cache_read_input"]}

    def invoke_with_cache_read_input(self, *, stream: bool = False) -> Any:
        llm = ChatOpenAI(**{**self.chat_model_params, "max_tokens": 4})
        prompt = "Summarise in one word: " + "the quick brown fox jumps over the lazy dog. " * 20
        llm.invoke(prompt)  # the second request finds the prompt in the engine's cache
        if stream:
            full = None
            for chunk in llm.stream(prompt):
                full = chunk if full is None else full + chunk
            return full
        return llm.invoke(prompt)

    @pytest.mark.xfail(
        reason=(
            f"{WEAK_MODEL}: asked for a call with a non-ASCII string argument, it repeats "
            f"characters inside the string until max_tokens={MAX_TOKENS}; the cut call comes "
            "back named, with finish_reason 'length', and ChatOpenAI puts it in "
            "invalid_tool_calls"
        ),
        strict=False,
    )
    def test_unicode_tool_call_integration(
        self,
        model: BaseChatModel,
        *,
        tool_choice: str | None = None,
        force_tool_call: bool = True,
    ) -> None:
        super().test_unicode_tool_call_integration(
            model, tool_choice=tool_choice, force_tool_call=force_tool_call
        )

    @pytest.mark.xfail(
        reason=(
            f"{WEAK_MODEL}: its joke runs on inside a JSON string ('a cat is a cat, ...') until "
            f"max_tokens={MAX_TOKENS}; the cut answer comes back with finish_reason 'length', "
            "which the openai client refuses to parse (LengthFinishReasonError)"
        ),
        strict=False,
    )
    def test_json_mode(self, model: BaseChatModel) -> None:
        super().test_json_mode(model)

    @pytest.mark.xfail(
        reason=(
            f"{WEAK_MODEL}: it fills a string field until max_tokens={MAX_TOKENS}; the cut "
            "answer comes back with finish_reason 'length' (LengthFinishReasonError)"
        ),
        strict=False,
    )
    def test_structured_output_optional_param(self, model: BaseChatModel) -> None:
        super().test_structured_output_optional_param(model)

    @pytest.mark.xfail(
        reason=(
            f"{WEAK_MODEL}: ChatOpenAI asks for a pydantic.v1 schema by a forced tool call, and "
            f"the model repeats 'a cat is a cat' inside the setup string until "
            f"max_tokens={MAX_TOKENS}; the cut call comes back named in invalid_tool_calls, "
            "so the parsed value is None"
        ),
        strict=False,
    )
    def test_structured_output_pydantic_2_v1(self, model: BaseChatModel) -> None:
        super().test_structured_output_pydantic_2_v1(model)

    @property
    def supports_model_override(self) -> bool:
        # One model is served under every name, and answers name the served model.
        return False

    @property
    def supports_image_inputs(self) -> bool:
        return False  # the session's engine has no projector

    @property
    def supports_image_urls(self) -> bool:
        return False

    @property
    def supports_image_tool_message(self) -> bool:
        return False

    @property
    def supports_pdf_inputs(self) -> bool:
        return False

    @property
    def supports_pdf_tool_message(self) -> bool:
        return False

    @property
    def supports_audio_inputs(self) -> bool:
        return False

    @property
    def supports_video_inputs(self) -> bool:
        return False

    @property
    def supports_anthropic_inputs(self) -> bool:
        return False
