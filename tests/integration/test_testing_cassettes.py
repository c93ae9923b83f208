"""The llamacpp cassettes beside pytest-recording's: one test replays a remote engine's HTTP
exchanges from its vcr cassette and the same engine's answers from its llamacpp cassette.

Both were recorded in one run against llama-server (``--record-mode=rewrite
--llamacpp-record-mode=all``), the llamacpp cassette through a RecordingEngine around the
remote engine; by default both are replayed, with no server and no model.
"""

from __future__ import annotations

import pytest

from llamacpp_integrations.engine import ChatMessage, ChatRequest, SamplingParams
from llamacpp_integrations.remote import RemoteEngine
from llamacpp_integrations.testing import ReplayEngine
from llamacpp_integrations.testing.pytest_plugin import LlamaCppCassette


def _chat(text: str, max_tokens: int) -> ChatRequest:
    return ChatRequest(
        messages=[ChatMessage(role="user", content=text)],
        sampling=SamplingParams(temperature=0.0),
        max_tokens=max_tokens,
    )


@pytest.mark.remote
@pytest.mark.vcr
@pytest.mark.llamacpp_cassette("remote_answers")
def test_one_test_holds_both_kinds_of_cassette(
    remote_engine: RemoteEngine, llamacpp_cassette: LlamaCppCassette
) -> None:
    engine = llamacpp_cassette.engine(lambda: remote_engine)
    assert llamacpp_cassette.path.parent.name == "test_testing_cassettes"
    request = _chat("Count to three.", 8)
    from_cassette = engine.generate(request)
    assert engine.detokenize(engine.tokenize("Hello world")) == "Hello world"
    over_http = remote_engine.generate(request)  # replayed by pytest-recording
    assert from_cassette.text == over_http.text and from_cassette.text
    assert from_cassette.usage.completion_tokens == over_http.usage.completion_tokens
    if llamacpp_cassette.replaying:
        assert isinstance(engine, ReplayEngine)
        # The same model, seen through the server; its URL differs (a live port when recorded).
        for field in ("name", "n_ctx_per_seq", "n_vocab", "chat_template"):
            assert getattr(engine.info, field) == getattr(remote_engine.info, field)
