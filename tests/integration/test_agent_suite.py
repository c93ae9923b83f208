"""The agent task suite (benchmarks/agent_tasks.py) on the real model, through LangChain's
``create_agent`` and LlamaIndex's ``FunctionAgent``, each with its default settings.

Asserted for every run: what the integration guarantees, that every tool call names an offered
tool with arguments valid against its JSON schema (a call ``max_tokens`` cut short is reported
as cut, and never made). And the goal the suite measures: that every task ends with an answer.
Before the loop guard, the tiny model repeated one identical call after every result until the
framework's limit (or, in LangChain, whose default recursion limit is 9,999, until the context
ran out): 1 of 15 tasks finished in LangChain, 0 of 15 in LlamaIndex.

Each (framework, task) pair runs once, when its validity test runs, and the answer test reads
the same run. All runs share one loaded model (the adapters are module fixtures).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from benchmarks.agent_tasks import (
    MODEL,
    TASKS,
    AgentTask,
    TaskRun,
    langchain_model,
    llama_index_model,
    run_langchain,
    run_llama_index,
)

if TYPE_CHECKING:
    from llamacpp_integrations.langchain import ChatLlamaCpp
    from llamacpp_integrations.llama_index import LlamaCpp

FRAMEWORKS = ("langchain", "llama_index")
# `make test` runs two tasks of each kind (one, a chain, a tool then an answer, no tool) on both
# frameworks; the other seven are marked slow (`make test-slow`, and `make bench-agents` runs
# all fifteen), to keep CI under its time limit.
EVERY_KIND = frozenset(
    {
        "add_numbers", "clock", "add_then_multiply", "capital_weather", "umbrella",
        "weight_compare", "thank_you_french", "romeo_author",
    }
)  # fmt: skip
CASES = [
    pytest.param(
        framework,
        task,
        id=f"{framework}-{task.name}",
        marks=() if task.name in EVERY_KIND else pytest.mark.slow,
    )
    for framework in FRAMEWORKS
    for task in TASKS
]

Runner = Callable[[str, AgentTask], TaskRun]


@pytest.fixture(scope="module")
def chat_model() -> ChatLlamaCpp:
    return langchain_model(MODEL)


@pytest.fixture(scope="module")
def index_llm() -> LlamaCpp:
    return llama_index_model(MODEL)


@pytest.fixture(scope="module")
def run_task(chat_model: ChatLlamaCpp, index_llm: LlamaCpp) -> Runner:
    """Runs a (framework, task) pair on first use; later uses get the same run."""
    runs: dict[tuple[str, str], TaskRun] = {}

    def run(framework: str, task: AgentTask) -> TaskRun:
        key = (framework, task.name)
        if key not in runs:
            if framework == "langchain":
                runs[key] = run_langchain(task, MODEL, llm=chat_model)
            else:
                runs[key] = run_llama_index(task, MODEL, llm=index_llm)
        return runs[key]

    return run


@pytest.mark.parametrize(("framework", "task"), CASES)
def test_every_tool_call_is_valid(framework: str, task: AgentTask, run_task: Runner) -> None:
    run = run_task(framework, task)
    invalid = [c for c in run.calls if not c.valid]
    assert not invalid, [(c.name, c.args, c.problem) for c in invalid]
    assert run.valid_calls == run.tool_calls
    offered = {fn.__name__ for fn in task.tools}
    assert {c.name for c in run.calls} <= offered
    # Runs end with an answer, at a framework limit, or on an error of the model's making
    # (the context running out): never on an error in the integration's own handling.
    if run.stopped_by == "error":
        assert run.error is not None and run.error.startswith("ContextOverflowError"), run.error


@pytest.mark.parametrize(("framework", "task"), CASES)
def test_every_task_finishes_with_an_answer(
    framework: str, task: AgentTask, run_task: Runner
) -> None:
    run = run_task(framework, task)
    assert run.finished, (run.stopped_by, run.steps, run.repeated_calls, run.error)
    assert run.answer.strip()


def test_function_agent_answers_after_one_multiply_call(smollm_path: Path) -> None:
    """The case the loop guard was made for: a ``FunctionAgent`` with one ``multiply`` tool on
    SmolLM2 at temperature 0 used to call ``multiply(6, 7)`` after every result until
    ``max_iterations`` ended the run with ``WorkflowRuntimeError``."""
    from llama_index.core.agent.workflow import AgentOutput, FunctionAgent, ToolCallResult
    from llama_index.core.tools import FunctionTool

    from llamacpp_integrations.llama_index import LlamaCpp

    def multiply(a: int, b: int) -> int:
        """Multiply two integers and return the product."""
        return a * b

    llm = LlamaCpp(model=str(smollm_path), temperature=0)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(multiply)], llm=llm)

    async def run() -> tuple[list[tuple[str, dict[str, object]]], AgentOutput]:
        handler = agent.run(user_msg="What is 6 times 7? Use the multiply tool.")
        calls = [
            (event.tool_name, event.tool_kwargs)
            async for event in handler.stream_events()
            if isinstance(event, ToolCallResult)
        ]
        return calls, await handler

    calls, output = asyncio.run(run())
    assert [name for name, _ in calls] == ["multiply"]
    assert output.response.content and output.response.content.strip()


def test_create_agent_with_a_response_format_calls_tools_then_answers_in_its_schema(
    chat_model: ChatLlamaCpp,
) -> None:
    """``create_agent(response_format=...)`` on a model whose profile says it has structured
    output sends the tools and the response format in one call (LangChain's provider
    strategy): an answer is then either calls or a JSON document of the schema."""
    from langchain.agents import create_agent
    from pydantic import BaseModel

    class Product(BaseModel):
        value: int

    def multiply(a: int, b: int) -> int:
        """Multiply two integers and return the product."""
        return a * b

    agent = create_agent(chat_model, tools=[multiply], response_format=Product)
    result = agent.invoke(
        {"messages": [("user", "What is 6 times 7? Use the multiply tool.")]},
        {"recursion_limit": 12},
    )
    assert isinstance(result["structured_response"], Product)
    calls = [c for m in result["messages"] for c in getattr(m, "tool_calls", None) or ()]
    assert all(call["name"] == "multiply" for call in calls)
