"""What an install without the ``local`` extra must still do, run where llama_cpp is missing.

``python tests/builders/without_local.py CASSETTE`` (no ``tests`` package needed: it runs in a
fresh venv too) replays the testing guide's agent cassette through ``ChatLlamaCpp`` with
``langchain_core`` alone (the agent's two calls made by hand: the tool call, then the answer),
then asks for a local model three ways and collects the errors. The model is an empty file:
its path resolves, so what fails is the missing engine, not the file. It prints one JSON line:
the replayed tool calls and answer, each way's error (its class and extra), and whether
llama_cpp could be imported.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

QUESTION = "What is 6 times 7? Use the multiply tool."


def replay_agent(cassette: str) -> dict[str, Any]:
    """The guide's agent run, replayed: the tool call the model made, and its answer."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    from llamacpp_integrations.langchain import ChatLlamaCpp
    from llamacpp_integrations.testing import ReplayEngine

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers and return the product."""
        return a * b

    llm = ChatLlamaCpp(engine=ReplayEngine(cassette), temperature=0, max_tokens=48)
    agent = llm.bind_tools([multiply])
    messages: list[Any] = [HumanMessage(QUESTION)]
    first = agent.invoke(messages)
    call = first.tool_calls[0]
    messages += [first, ToolMessage(str(multiply.invoke(call["args"])), tool_call_id=call["id"])]
    answer = agent.invoke(messages)
    return {
        "tool_calls": [{"name": c["name"], "args": c["args"]} for c in first.tool_calls],
        "answer": answer.content,
    }


def local_model_errors(model: str) -> dict[str, Any]:
    """Each way of asking for a local model, and the error it raised (None: none)."""
    from llamacpp_integrations import EngineConfig, shared_engine
    from llamacpp_integrations.langchain import ChatLlamaCpp

    def engine() -> Any:
        from llamacpp_integrations import Engine

        return Engine(EngineConfig(model=model))

    ways = {
        "Engine": engine,
        "shared_engine": lambda: shared_engine(EngineConfig(model=model)),
        "ChatLlamaCpp": lambda: ChatLlamaCpp(model=model).invoke("Hi"),
    }
    return {name: error_of(way) for name, way in ways.items()}


def error_of(call: Any) -> dict[str, Any] | None:
    """The error ``call`` raised, as JSON: its class, its extra (if any) and its message."""
    try:
        call()
    except Exception as error:
        return {
            "type": type(error).__name__,
            "extra": getattr(error, "extra", None),
            "message": str(error),
        }
    return None


def llama_cpp_importable() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def main(cassette: str) -> None:
    result = replay_agent(cassette)
    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder) / "model.gguf"
        model.touch()
        result["errors"] = local_model_errors(str(model))
    result["llama_cpp_importable"] = llama_cpp_importable()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
