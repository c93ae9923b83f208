"""The example of docs/guides/testing.md: a LangChain agent tested without the model.

Its cassette, tests/cassettes/unit/test_guide_testing/, was recorded once on the real model
(tests/unit sessions cannot import llama.cpp, so another folder joins the run)::

    pytest tests/unit/test_guide_testing.py tests/integration/test_testing_cassettes.py \
        --llamacpp-record-mode=once

and is replayed by every other run, with no model and without llama.cpp.
"""

from collections.abc import Iterator

import pytest
from langchain.agents import create_agent

from llamacpp_integrations import EngineConfig, InferenceEngine
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.testing.pytest_plugin import LlamaCppCassette


def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the product."""
    return a * b


@pytest.fixture(scope="session")
def real_engine() -> Iterator[InferenceEngine]:
    """The model: loaded only when a cassette is recorded."""
    from llamacpp_integrations import Engine

    with Engine(EngineConfig(model="smollm2-135m")) as engine:
        yield engine


def test_the_agent_calls_multiply_and_answers(llamacpp_cassette: LlamaCppCassette) -> None:
    engine = llamacpp_cassette.engine("real_engine")  # replayed unless recording
    llm = ChatLlamaCpp(engine=engine, temperature=0, max_tokens=48)
    agent = create_agent(llm, tools=[multiply])

    result = agent.invoke({"messages": [("user", "What is 6 times 7? Use the multiply tool.")]})

    calls = [call for message in result["messages"] for call in getattr(message, "tool_calls", [])]
    assert calls[0]["name"] == "multiply" and calls[0]["args"] == {"a": 6, "b": 7}
    tool_results = [message.content for message in result["messages"] if message.type == "tool"]
    assert tool_results[0] == "42"
    assert result["messages"][-1].content  # the agent ends with an answer
