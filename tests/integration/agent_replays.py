"""One LangChain ``create_agent`` run and one LlamaIndex ``FunctionAgent`` run on any engine,
streamed, reduced to what a replay must give again: every streamed piece, the tool calls
(name and arguments; their ids are made up anew each run) and the answer.

Run on a RecordingEngine by tests/integration/test_testing_replay.py, then on a ReplayEngine
in a process where llama_cpp cannot be imported (``python -m tests.integration.agent_replays
FRAMEWORK CASSETTE`` prints the run as JSON).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from llamacpp_integrations.engine import InferenceEngine

QUESTION = "What is 6 times 7? Use the multiply tool."
MAX_TOKENS = 48


def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the product."""
    return a * b


def langchain_run(engine: InferenceEngine, question: str = QUESTION) -> dict[str, Any]:
    """``create_agent`` with ``multiply``, streamed message by message."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
    from langchain_core.tools import tool

    from llamacpp_integrations.langchain import ChatLlamaCpp

    llm = ChatLlamaCpp(engine=engine, temperature=0, max_tokens=MAX_TOKENS)
    agent = create_agent(llm, tools=[tool(multiply)])
    pieces: list[Any] = []
    messages: list[Any] = []
    for mode, payload in agent.stream(
        {"messages": [HumanMessage(question)]}, stream_mode=["messages", "values"]
    ):
        if mode == "values":
            messages = list(payload["messages"])
            continue
        chunk, _ = payload
        if isinstance(chunk, AIMessageChunk):
            calls = [[c.get("name"), c.get("args"), c.get("index")] for c in chunk.tool_call_chunks]
            pieces.append([chunk.content, calls])
    calls = [
        [call["name"], call["args"]]
        for message in messages
        if isinstance(message, AIMessage)
        for call in message.tool_calls
    ]
    return {"pieces": pieces, "calls": calls, "answer": messages[-1].content}


async def _llama_index_run(engine: InferenceEngine, question: str) -> dict[str, Any]:
    from llama_index.core.agent.workflow import AgentStream, FunctionAgent, ToolCallResult
    from llama_index.core.tools import FunctionTool

    from llamacpp_integrations.llama_index import LlamaCpp

    llm = LlamaCpp(engine=engine, temperature=0, max_tokens=MAX_TOKENS)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(multiply)], llm=llm)
    handler = agent.run(user_msg=question)
    pieces: list[str] = []
    calls: list[Any] = []
    async for event in handler.stream_events():
        if isinstance(event, AgentStream):
            pieces.append(event.delta)
        elif isinstance(event, ToolCallResult):
            calls.append([event.tool_name, event.tool_kwargs, str(event.tool_output)])
    output = await handler
    return {"pieces": pieces, "calls": calls, "answer": output.response.content}


def llama_index_run(engine: InferenceEngine, question: str = QUESTION) -> dict[str, Any]:
    """``FunctionAgent`` with ``multiply``, its events streamed."""
    return asyncio.run(_llama_index_run(engine, question))


RUNS = {"langchain": langchain_run, "llama_index": llama_index_run}


def main(framework: str, cassette: str) -> None:
    from llamacpp_integrations.testing import ReplayEngine

    start = time.perf_counter()
    run = RUNS[framework](ReplayEngine(cassette))
    run["seconds"] = time.perf_counter() - start
    run["llama_cpp_imported"] = "llama_cpp" in sys.modules
    print(json.dumps(run))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
