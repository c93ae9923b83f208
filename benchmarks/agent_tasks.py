"""Agent tasks on the local model, through LangChain's ``create_agent`` and LlamaIndex's
``FunctionAgent``, with each framework's DEFAULT settings: no middleware, no forced tool choice,
no system prompt, the default recursion / iteration limits.

Each task is a user question, two or three small pure tools, and a kind: one tool, a chain of two
tools, a tool then an answer, or a question that needs no tool. Per run it records whether the
agent finished with a text answer, its model turns, every tool call (offered name and arguments
valid against the tool's JSON schema, checked with ``jsonschema``), and the repeated calls: a call
identical (same tool, same arguments as canonical JSON) to one whose result was already in the
conversation, and the repeats the package's loop guard kept out (reported by the adapters:
``response_metadata["repeated_calls_prevented"]`` in LangChain, ``raw`` in LlamaIndex). A call
``max_tokens`` cut short is counted apart (``cut_calls``): it is reported as such, never run.

Nothing is asserted here (``tests/integration/test_agent_suite.py`` asserts on the same runs).
Run from the repository root, with ``LLAMACPP_INTEGRATIONS_MODELS`` pointing at the models and,
on a shared machine, under the model lock::

    flock /tmp/llama-run.lock python benchmarks/agent_tasks.py [--model smollm2-135m]
        [--tasks add_numbers,sky_colour] [--allow-repeated-calls] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import jsonschema

if TYPE_CHECKING:
    from llamacpp_integrations.langchain import ChatLlamaCpp
    from llamacpp_integrations.llama_index import LlamaCpp

MODEL = "smollm2-135m"
MAX_TOKENS = 128

# -- the tools: pure, deterministic, total (they answer every input, never raise) -----------------

CAPITALS = {
    "france": "Paris",
    "italy": "Rome",
    "japan": "Tokyo",
    "spain": "Madrid",
    "germany": "Berlin",
    "canada": "Ottawa",
}
WEATHER = {
    "paris": "sunny, 22 °C",
    "rome": "sunny, 27 °C",
    "london": "rain, 14 °C",
    "tokyo": "cloudy, 18 °C",
    "madrid": "clear, 30 °C",
    "berlin": "windy, 16 °C",
}
UNIT_FACTORS = {
    ("km", "miles"): 0.621371,
    ("miles", "km"): 1.609344,
    ("kg", "pounds"): 2.204623,
    ("pounds", "kg"): 0.453592,
    ("m", "feet"): 3.280840,
    ("feet", "m"): 0.304800,
}
UNIT_NAMES = {
    "km": "km", "kilometre": "km", "kilometres": "km", "kilometer": "km", "kilometers": "km",
    "mile": "miles", "miles": "miles", "mi": "miles",
    "kg": "kg", "kilogram": "kg", "kilograms": "kg",
    "pound": "pounds", "pounds": "pounds", "lb": "pounds", "lbs": "pounds",
    "m": "m", "metre": "m", "metres": "m", "meter": "m", "meters": "m",
    "foot": "feet", "feet": "feet", "ft": "feet",
}  # fmt: skip
FIXED_TIME = "09:30 UTC on Wednesday 15 January 2025"


def add(a: int, b: int) -> int:
    """Add two integers and return the sum."""
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the product."""
    return a * b


def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a value between units: km and miles, kg and pounds, metres and feet."""
    source = UNIT_NAMES.get(from_unit.strip().lower(), from_unit)
    target = UNIT_NAMES.get(to_unit.strip().lower(), to_unit)
    factor = UNIT_FACTORS.get((source, target))
    if factor is None:
        return f"Cannot convert {from_unit} to {to_unit}."
    return f"{value:g} {source} = {round(value * factor, 2):g} {target}"


def capital_of(country: str) -> str:
    """Look up the capital city of a country."""
    capital = CAPITALS.get(country.strip().lower())
    return f"The capital of {country} is {capital}." if capital else f"Unknown country: {country}."


def get_weather(city: str) -> str:
    """Current weather in a city."""
    weather = WEATHER.get(city.strip().lower())
    return f"Weather in {city}: {weather}." if weather else f"No weather data for {city}."


def current_time() -> str:
    """The current date and time (UTC)."""
    return f"It is {FIXED_TIME}."


# -- the tasks ------------------------------------------------------------------------------------

TaskKind = Literal["one_tool", "chain", "tool_then_answer", "no_tool"]


@dataclass(frozen=True)
class AgentTask:
    """One question for an agent.

    Attributes:
        name: Short identifier (``--tasks`` takes these).
        question: The user message.
        tools: The Python functions offered as tools (2 or 3).
        kind: One tool, two tools in a chain, a tool then an answer, or no tool needed.
        solution: The tool calls a right solution makes, in order (empty for ``no_tool``).
        expected: Text a right answer contains (any one, case-insensitive); reported only.
    """

    name: str
    question: str
    tools: tuple[Callable[..., Any], ...]
    kind: TaskKind
    solution: tuple[str, ...]
    expected: tuple[str, ...]


TASKS: tuple[AgentTask, ...] = (
    AgentTask("add_numbers", "What is 17 + 25?", (add, multiply), "one_tool", ("add",), ("42",)),
    AgentTask(
        "multiply_numbers", "What is 13 times 7?", (add, multiply), "one_tool",
        ("multiply",), ("91",),
    ),
    AgentTask(
        "weather_paris", "What is the weather like in Paris right now?",
        (get_weather, current_time), "one_tool", ("get_weather",), ("sunny", "22"),
    ),
    AgentTask(
        "capital_japan", "What is the capital of Japan?", (capital_of, get_weather), "one_tool",
        ("capital_of",), ("tokyo",),
    ),
    AgentTask(
        "clock", "What time is it?", (current_time, get_weather), "one_tool",
        ("current_time",), ("9:30",),
    ),
    AgentTask(
        "km_to_miles", "How many miles are 10 kilometres?", (convert_units, multiply),
        "one_tool", ("convert_units",), ("6.21",),
    ),
    AgentTask(
        "add_then_multiply", "What is (2 + 3) * 4?", (add, multiply), "chain",
        ("add", "multiply"), ("20",),
    ),
    AgentTask(
        "multiply_then_add", "Multiply 6 by 7, then add 8 to the result.", (add, multiply),
        "chain", ("multiply", "add"), ("50",),
    ),
    AgentTask(
        "capital_weather", "What is the weather in the capital of Italy?",
        (capital_of, get_weather, current_time), "chain", ("capital_of", "get_weather"),
        ("27", "sunny"),
    ),
    AgentTask(
        "umbrella", "Should I take an umbrella in London today? Check the weather first.",
        (get_weather, current_time), "tool_then_answer", ("get_weather",), ("yes",),
    ),
    AgentTask(
        "square_compare", "Multiply 12 by 12 and tell me whether the result is bigger than 100.",
        (multiply, add), "tool_then_answer", ("multiply",), ("yes", "bigger", "greater"),
    ),
    AgentTask(
        "weight_compare", "Convert 70 kg to pounds and say whether that is more than 150 pounds.",
        (convert_units, add), "tool_then_answer", ("convert_units",), ("154",),
    ),
    AgentTask(
        "thank_you_french", "How do you say 'thank you' in French?", (add, multiply), "no_tool",
        (), ("merci",),
    ),
    AgentTask(
        "sky_colour", "What colour is the sky on a clear day?", (get_weather, current_time),
        "no_tool", (), ("blue",),
    ),
    AgentTask(
        "romeo_author", "Who wrote Romeo and Juliet?", (capital_of, convert_units), "no_tool",
        (), ("shakespeare",),
    ),
)  # fmt: skip
TASKS_BY_NAME = {task.name: task for task in TASKS}


# -- what one run records -------------------------------------------------------------------------

StopReason = Literal["answer", "empty answer", "limit", "error"]


@dataclass
class CallRecord:
    """One tool call the model made.

    Attributes:
        name: The tool it named.
        args: Its arguments (the raw text when they did not parse).
        valid: The name was offered and the arguments validate against the tool's JSON schema.
        problem: Why it is not valid (``None`` when valid).
        repeated: Identical to a call whose result was already in the conversation.
        tool_error: The framework reported the tool's result as an error.
        step: The model turn (1-based) that made it.
    """

    name: str
    args: Any
    valid: bool
    problem: str | None
    repeated: bool
    tool_error: bool = False
    step: int = 0


@dataclass
class TaskRun:
    """One task through one framework.

    Attributes:
        task: The task's name.
        framework: ``langchain`` or ``llama_index``.
        finished: The run ended with a final text answer (not an error, not a limit).
        stopped_by: ``answer``, ``empty answer``, ``limit`` (recursion / iteration limit) or
            ``error`` (any other exception, e.g. the context running out).
        steps: Model turns.
        tool_calls: Tool calls made.
        valid_calls: Calls naming an offered tool with schema-valid arguments.
        repeated_calls: Calls identical to one whose result was already in the conversation.
        repeats_prevented: Repeats the package reports its loop guard kept out.
        cut_calls: Calls ``max_tokens`` cut short (reported by the package, not made).
        tool_errors: Calls whose result the framework marked as an error.
        answer: The final answer text ("" when none).
        correct: The answer contains one of the task's expected texts (reported, not asserted).
        error: The exception that ended the run (type and message), if any.
        seconds: Wall time of the run.
        calls: Every call, in order.
    """

    task: str
    framework: str
    finished: bool
    stopped_by: StopReason
    steps: int
    tool_calls: int
    valid_calls: int
    repeated_calls: int
    repeats_prevented: int = 0
    cut_calls: int = 0
    tool_errors: int = 0
    answer: str = ""
    correct: bool = False
    error: str | None = None
    seconds: float = 0.0
    calls: list[CallRecord] = field(default_factory=list)


def canonical(args: Any) -> str:
    """Arguments as canonical JSON (sorted keys, no spaces); raw text stays as it is."""
    if isinstance(args, str):
        return args
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def call_problem(name: str, args: Any, schemas: dict[str, dict[str, Any]]) -> str | None:
    """Why a call is not valid for the tools offered (``None``: it is valid)."""
    if name not in schemas:
        return f"tool {name!r} was not offered"
    if not isinstance(args, dict):
        return f"arguments are not a JSON object: {args!r}"
    try:
        jsonschema.validate(args, schemas[name])
    except jsonschema.ValidationError as error:
        return f"arguments do not match the schema: {error.message}"
    return None


class _Calls:
    """Builds the call records of a run from its turns and tool results, in conversation order."""

    def __init__(self, schemas: dict[str, dict[str, Any]]) -> None:
        self.schemas = schemas
        self.records: list[CallRecord] = []
        self._by_id: dict[str, CallRecord] = {}
        self._results_seen: set[tuple[str, str]] = set()

    def call(
        self, call_id: str | None, name: str, args: Any, step: int, problem: str | None = None
    ) -> None:
        problem = problem or call_problem(name, args, self.schemas)
        record = CallRecord(
            name=name,
            args=args,
            valid=problem is None,
            problem=problem,
            repeated=(name, canonical(args)) in self._results_seen,
            step=step,
        )
        self.records.append(record)
        if call_id:
            self._by_id[call_id] = record

    def result(self, call_id: str | None, *, is_error: bool) -> None:
        record = self._by_id.get(call_id or "")
        if record is None:
            return
        record.tool_error = is_error
        self._results_seen.add((record.name, canonical(record.args)))


def _matches(answer: str, task: AgentTask) -> bool:
    folded = answer.casefold()
    return any(text.casefold() in folded for text in task.expected)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _finish(
    task: AgentTask,
    framework: str,
    calls: _Calls,
    *,
    steps: int,
    answer: str,
    error: BaseException | None,
    limit: bool,
    seconds: float,
    repeats_prevented: int = 0,
    cut_calls: int = 0,
) -> TaskRun:
    if error is not None:
        stopped_by: StopReason = "limit" if limit else "error"
    else:
        stopped_by = "answer" if answer.strip() else "empty answer"
    records = calls.records
    return TaskRun(
        task=task.name,
        framework=framework,
        finished=stopped_by == "answer",
        stopped_by=stopped_by,
        steps=steps,
        tool_calls=len(records),
        valid_calls=sum(r.valid for r in records),
        repeated_calls=sum(r.repeated for r in records),
        repeats_prevented=repeats_prevented,
        cut_calls=cut_calls,
        tool_errors=sum(r.tool_error for r in records),
        answer=answer,
        correct=stopped_by == "answer" and _matches(answer, task),
        error=None if error is None else _describe(error),
        seconds=round(seconds, 2),
        calls=records,
    )


# -- LangChain ------------------------------------------------------------------------------------


def langchain_model(model: str = MODEL, *, allow_repeated_calls: bool = False) -> ChatLlamaCpp:
    """The chat model the LangChain runs use (greedy, ``MAX_TOKENS`` per turn; the loop guard
    on unless ``allow_repeated_calls``)."""
    from llamacpp_integrations.langchain import ChatLlamaCpp

    return ChatLlamaCpp(
        model=model,
        temperature=0,
        max_tokens=MAX_TOKENS,
        allow_repeated_calls=allow_repeated_calls,
    )


def run_langchain(
    task: AgentTask, model: str = MODEL, *, llm: ChatLlamaCpp | None = None
) -> TaskRun:
    """``task`` through ``langchain.agents.create_agent`` with its default settings.

    ``llm`` reuses a chat model (and so its loaded engine) across runs; by default one is made.
    """
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool as as_tool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.errors import GraphRecursionError

    chat_model = llm if llm is not None else langchain_model(model)
    tools = [as_tool(fn) for fn in task.tools]
    schemas = {t.name: convert_to_openai_tool(t)["function"]["parameters"] for t in tools}
    agent = create_agent(chat_model, tools=tools)

    messages: list[Any] = []
    error: BaseException | None = None
    start = time.perf_counter()
    try:
        # "values" streams the whole state after each step: what happened before an error stays.
        for state in agent.stream(
            {"messages": [HumanMessage(task.question)]}, stream_mode="values"
        ):
            messages = list(state["messages"])
    except Exception as caught:
        error = caught
    seconds = time.perf_counter() - start

    calls = _Calls(schemas)
    steps = prevented = cut = 0
    for message in messages:
        if isinstance(message, AIMessage):
            steps += 1
            prevented += message.response_metadata.get("repeated_calls_prevented", 0)
            for call in message.tool_calls:
                calls.call(call.get("id"), call["name"], call["args"], steps)
            for bad in message.invalid_tool_calls:
                if (bad.get("error") or "").startswith("max_tokens ended"):
                    cut += 1  # reported as cut, not made: not a call of the integration's
                    continue
                problem = f"invalid tool call: {bad.get('error') or 'arguments did not parse'}"
                calls.call(
                    bad.get("id"), bad.get("name") or "", bad.get("args") or "", steps, problem
                )
        elif isinstance(message, ToolMessage):
            calls.result(message.tool_call_id, is_error=message.status == "error")

    answer = ""
    last = messages[-1] if messages else None
    if error is None and isinstance(last, AIMessage) and not last.tool_calls:
        answer = last.text
    return _finish(
        task,
        "langchain",
        calls,
        steps=steps,
        answer=answer,
        error=error,
        limit=isinstance(error, GraphRecursionError),
        seconds=seconds,
        repeats_prevented=prevented,
        cut_calls=cut,
    )


# -- LlamaIndex -----------------------------------------------------------------------------------


def llama_index_model(model: str = MODEL, *, allow_repeated_calls: bool = False) -> LlamaCpp:
    """The LLM the LlamaIndex runs use (greedy, ``MAX_TOKENS`` per turn; the loop guard on
    unless ``allow_repeated_calls``)."""
    from llamacpp_integrations.llama_index import LlamaCpp

    return LlamaCpp(
        model=model,
        temperature=0,
        max_tokens=MAX_TOKENS,
        allow_repeated_calls=allow_repeated_calls,
    )


async def arun_llama_index(
    task: AgentTask, model: str = MODEL, *, llm: LlamaCpp | None = None
) -> TaskRun:
    """``task`` through LlamaIndex's ``FunctionAgent`` with its default settings."""
    from llama_index.core.agent.workflow import AgentOutput, FunctionAgent, ToolCallResult
    from llama_index.core.llms.llm import ToolSelection
    from llama_index.core.tools import FunctionTool
    from llama_index.core.workflow import WorkflowRuntimeError

    agent_llm = llm if llm is not None else llama_index_model(model)
    tools = [FunctionTool.from_defaults(fn) for fn in task.tools]
    offered: list[Any] = list(tools)  # FunctionAgent's list type is invariant
    schemas = {
        t.metadata.name or "": t.metadata.to_openai_tool()["function"]["parameters"] for t in tools
    }
    agent = FunctionAgent(tools=offered, llm=agent_llm)

    calls = _Calls(schemas)
    steps = prevented = cut = 0
    final: Any = None
    error: BaseException | None = None
    start = time.perf_counter()
    handler = agent.run(user_msg=task.question)
    try:
        async for event in handler.stream_events():
            if isinstance(event, AgentOutput):
                steps += 1
                raw = event.raw if isinstance(event.raw, dict) else {}
                prevented += raw.get("repeated_calls_prevented", 0)
                cut += len(raw.get("invalid_tool_calls", ()))
                # The run's last AgentOutput later gets the run's ToolCallResults appended to
                # its tool_calls: only the ToolSelections are this turn's calls.
                for call in list(event.tool_calls):
                    if isinstance(call, ToolSelection):
                        calls.call(call.tool_id, call.tool_name, call.tool_kwargs, steps)
            elif isinstance(event, ToolCallResult):
                calls.result(event.tool_id, is_error=bool(event.tool_output.is_error))
        final = await handler
    except Exception as caught:
        error = caught
    seconds = time.perf_counter() - start

    answer = ""
    if error is None and isinstance(final, AgentOutput):
        answer = final.response.content or ""
    # The default early_stopping_method ("force") raises this when max_iterations run out.
    limit = isinstance(error, WorkflowRuntimeError) and "Max iterations" in str(error)
    return _finish(
        task,
        "llama_index",
        calls,
        steps=steps,
        answer=answer,
        error=error,
        limit=limit,
        seconds=seconds,
        repeats_prevented=prevented,
        cut_calls=cut,
    )


def run_llama_index(task: AgentTask, model: str = MODEL, *, llm: LlamaCpp | None = None) -> TaskRun:
    """``arun_llama_index`` on a fresh event loop."""
    return asyncio.run(arun_llama_index(task, model, llm=llm))


# -- the report -----------------------------------------------------------------------------------

FRAMEWORKS = {
    "langchain": "LangChain `create_agent` (defaults)",
    "llama_index": "LlamaIndex `FunctionAgent` (defaults)",
}


def summary(runs: Sequence[TaskRun]) -> dict[str, Any]:
    """The totals one framework's table shows."""
    return {
        "tasks": len(runs),
        "finished": sum(r.finished for r in runs),
        "correct": sum(r.correct for r in runs),
        "mean_steps": statistics.fmean(r.steps for r in runs) if runs else 0.0,
        "tool_calls": sum(r.tool_calls for r in runs),
        "valid_calls": sum(r.valid_calls for r in runs),
        "repeated_calls": sum(r.repeated_calls for r in runs),
        "repeats_prevented": sum(r.repeats_prevented for r in runs),
        "cut_calls": sum(r.cut_calls for r in runs),
        "seconds": round(sum(r.seconds for r in runs), 1),
    }


def _cell(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def markdown(framework: str, runs: Sequence[TaskRun]) -> str:
    """One framework's summary table and per-task table."""
    s = summary(runs)
    lines = [
        f"### {FRAMEWORKS.get(framework, framework)}",
        "",
        "| finished with an answer | right answer | mean steps | valid calls / calls "
        "| repeated calls | repeats prevented | calls cut by max_tokens | time s |",
        "|---|---|---|---|---|---|---|---|",
        f"| {s['finished']}/{s['tasks']} | {s['correct']}/{s['tasks']} | {s['mean_steps']:.1f} "
        f"| {s['valid_calls']}/{s['tool_calls']} | {s['repeated_calls']} "
        f"| {s['repeats_prevented']} | {s['cut_calls']} | {s['seconds']:.1f} |",
        "",
        "| task | kind | stopped by | steps | valid / calls | repeated | s | answer or error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        kind = TASKS_BY_NAME[r.task].kind if r.task in TASKS_BY_NAME else "?"
        text = r.answer if r.error is None else r.error
        lines.append(
            f"| {r.task} | {kind} | {r.stopped_by} | {r.steps} | {r.valid_calls}/{r.tool_calls} "
            f"| {r.repeated_calls} | {r.seconds:.1f} | {_cell(text)} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--tasks", default=None, help="comma-separated task names (default: all)")
    parser.add_argument(
        "--frameworks",
        default="langchain,llama_index",
        help="comma-separated: langchain, llama_index",
    )
    parser.add_argument(
        "--allow-repeated-calls",
        action="store_true",
        help="turn the loop guard off (to see what it changes)",
    )
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args(argv)
    allow = args.allow_repeated_calls
    names = args.tasks.split(",") if args.tasks else [t.name for t in TASKS]
    unknown = [n for n in names if n not in TASKS_BY_NAME]
    if unknown:
        parser.error(f"unknown tasks: {', '.join(unknown)} (known: {', '.join(TASKS_BY_NAME)})")
    frameworks = args.frameworks.split(",")
    if set(frameworks) - set(FRAMEWORKS):
        parser.error(f"--frameworks takes {', '.join(FRAMEWORKS)}")
    tasks = [TASKS_BY_NAME[n] for n in names]

    runners: dict[str, Callable[[AgentTask], TaskRun]] = {}
    if "langchain" in frameworks:
        chat_model = langchain_model(args.model, allow_repeated_calls=allow)
        runners["langchain"] = lambda task: run_langchain(task, args.model, llm=chat_model)
    if "llama_index" in frameworks:
        index_llm = llama_index_model(args.model, allow_repeated_calls=allow)
        runners["llama_index"] = lambda task: run_llama_index(task, args.model, llm=index_llm)

    results: dict[str, list[TaskRun]] = {}
    start = time.perf_counter()
    for framework, runner in runners.items():  # one after another, never in parallel
        results[framework] = []
        for task in tasks:
            run = runner(task)
            results[framework].append(run)
            print(
                f"[{framework}] {task.name}: {run.stopped_by}, {run.steps} steps, "
                f"{run.valid_calls}/{run.tool_calls} valid calls, {run.repeated_calls} repeated, "
                f"{run.seconds:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    total = time.perf_counter() - start

    for framework, runs in results.items():
        print(markdown(framework, runs))
        print()
    print(f"Total run time: {total:.1f} s")

    if args.json:
        import results as results_file  # benchmarks/results.py, beside this script

        results_file.write(
            args.json,
            "agent_tasks",
            {
                "model": args.model,
                "max_tokens": MAX_TOKENS,
                "temperature": 0,
                "tasks": names,
                "loop_guard": not allow,
            },
            total_seconds=round(total, 1),
            summaries={f: summary(runs) for f, runs in results.items()},
            runs={f: [asdict(r) for r in runs] for f, runs in results.items()},
        )


if __name__ == "__main__":
    main()
