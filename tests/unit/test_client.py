"""The adapter core's logic without a model: option merging, response formats, the retry rule
of the executors, and how a binding keeps and replaces engines (with stand-in engines)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from pydantic import BaseModel

from llamacpp_integrations import client
from llamacpp_integrations.engine import (
    ChatRequest,
    EngineConfig,
    registry,
)
from llamacpp_integrations.errors import (
    EngineOverloadedError,
    InvalidRequestError,
    UnknownOptionError,
)
from llamacpp_integrations.testing import Answer, ScriptedEngine

DEFAULTS = {"temperature": 0.5, "max_tokens": 10, "stop": ["\n"], "logprobs": None}


# -- options ------------------------------------------------------------------------------------


def test_call_keywords_override_the_defaults_and_left_out_ones_keep_them() -> None:
    options = client.CallOptions.merge(
        DEFAULTS, {"temperature": 0.0, "max_tokens": client.UNSET, "top_k": 3}, owner="X"
    )
    assert options.sampling.temperature == 0.0 and options.sampling.top_k == 3
    assert options.max_tokens == 10 and options.stop == ("\n",)
    assert options.logprobs is None and options.tools is None
    # None is a value of its own (tests/unit/test_call_limits.py): here, no limit.
    assert client.CallOptions.merge(DEFAULTS, {"max_tokens": None}, owner="X").max_tokens is None


def test_unknown_keywords_are_one_error_type_for_every_adapter() -> None:
    with pytest.raises(UnknownOptionError, match="unexpected arguments for X: frobnicate"):
        client.CallOptions.merge(DEFAULTS, {"frobnicate": True}, owner="X")
    assert issubclass(UnknownOptionError, TypeError)
    assert issubclass(UnknownOptionError, InvalidRequestError)
    with pytest.raises(UnknownOptionError, match="tools"):
        client.CallOptions.merge(DEFAULTS, {"tools": []}, owner="X", chat=False)


def test_logprobs_tool_choice_and_single_stop_strings() -> None:
    options = client.CallOptions.merge(
        DEFAULTS,
        {"logprobs": True, "top_logprobs": 3, "stop": "END", "tool_choice": False},
        owner="X",
    )
    assert options.logprobs == 3 and options.stop == ("END",)
    assert options.tool_choice is False  # False means "none", not the default


def test_tools_with_a_response_format_answer_with_calls_or_a_document_of_the_schema() -> None:
    """What LangChain's ``create_agent(response_format=...)`` sends: both in one call."""
    from llamacpp_integrations.tools import ToolSpec
    from llamacpp_integrations.tools.call_syntax import HERMES, TOOL_CALL_LIST
    from llamacpp_integrations.tools.tool_grammar import tool_calls_gbnf

    from .gbnf_matcher import Grammar

    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    options = client.CallOptions.merge(
        DEFAULTS, {"tools": [tool], "response_format": {"type": "json_object"}}, owner="X"
    )
    assert options.tools and options.response_format is not None
    spec = ToolSpec(name="f", description="", parameters={"type": "object", "properties": {}})
    schema = {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]}
    native = Grammar(tool_calls_gbnf([spec], HERMES, parallel=False, answer_schema=schema))
    assert native.accepts('<tool_call>{"name": "f", "arguments": {}}</tool_call>')
    assert native.accepts('{"value": 42}')
    assert not native.accepts("It is 42.") and not native.accepts('{"value": "42"}')
    listed = Grammar(
        tool_calls_gbnf(
            [spec], TOOL_CALL_LIST, parallel=True, allow_text=True, answer_schema=schema
        )
    )
    assert listed.accepts('<tool_call>[{"name": "f", "arguments": {}}]</tool_call>')
    assert listed.accepts('<tool_call>[]</tool_call>{"value": 42}')
    assert not listed.accepts("<tool_call>[]</tool_call>It is 42.")


def test_a_grammar_is_a_call_option_but_not_beside_tools_or_formats() -> None:
    grammar = 'root ::= "yes" | "no"'
    options = client.CallOptions.merge(DEFAULTS, {"grammar": grammar}, owner="X", chat=False)
    assert options.grammar == grammar
    request = client.request_of(options, prompt="Is it?")
    assert request.grammar == grammar
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(InvalidRequestError, match="grammar cannot be used together with tools"):
        client.CallOptions.merge(DEFAULTS, {"grammar": grammar, "tools": [tool]}, owner="X")
    with pytest.raises(InvalidRequestError, match="grammar cannot be used together"):
        client.CallOptions.merge(
            DEFAULTS, {"grammar": grammar, "response_format": {"type": "json_object"}}, owner="X"
        )
    with pytest.raises(InvalidRequestError, match="non-empty GBNF"):
        client.CallOptions.merge(DEFAULTS, {"grammar": "  "}, owner="X")


def test_response_formats_in_every_shape() -> None:
    class Pet(BaseModel):
        name: str

    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    read = client.read_response_format
    assert read(Pet).schema == Pet.model_json_schema()
    assert read({"type": "json_object"}).schema is None
    assert read({"type": "json_object", "schema": schema}).schema == schema
    assert read({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}).schema == (
        schema
    )
    assert read({"type": "json_schema", "schema": schema}).schema == schema
    assert read({"type": "json_schema", "json_schema": schema}).schema == schema
    with pytest.raises(InvalidRequestError, match="response_format"):
        read("json")


# -- the executors' retry rule ------------------------------------------------------------------


FULL = Answer.refused(EngineOverloadedError("full"))
AB = Answer(pieces=["a", "b"])


PLAN = client.CallPlan(ChatRequest(messages=[{"role": "user", "content": "x"}]))
RETRY = client.RetryPolicy(max_retries=2, base_delay_s=0.0)


def test_a_stream_refused_before_its_first_piece_is_retried() -> None:
    engine = ScriptedEngine(answers=[FULL, AB])
    pieces = list(client.stream(engine, PLAN, RETRY))
    assert len(engine.requests) == 2
    assert "".join(p.text for p in pieces) == "ab"


async def test_an_async_stream_refused_before_its_first_piece_is_retried() -> None:
    engine = ScriptedEngine(answers=[FULL, AB])
    pieces = [p async for p in client.astream(engine, PLAN, RETRY)]
    assert len(engine.requests) == 2
    assert "".join(p.text for p in pieces) == "ab"


def test_a_failure_after_the_first_piece_is_not_retried() -> None:
    late = Answer(pieces=["a"], fail_at=1, error=EngineOverloadedError("late"))
    engine = ScriptedEngine(answers=[late, AB])
    stream = client.stream(engine, PLAN, RETRY)
    assert next(stream).text == "a"
    with pytest.raises(EngineOverloadedError, match="late"):
        next(stream)
    assert len(engine.requests) == 1


def test_retries_run_out() -> None:
    engine = ScriptedEngine(answers=[FULL])  # the last answer repeats
    with pytest.raises(EngineOverloadedError):
        list(client.stream(engine, PLAN, RETRY))
    assert len(engine.requests) == 3
    assert [RETRY.pause(n) for n in range(3)] == [0.0, 0.0, None]


# -- the binding --------------------------------------------------------------------------------


@pytest.fixture
def configs() -> dict[ScriptedEngine, EngineConfig]:
    """The engines the registry opened (scripted stand-ins), each with its settings."""
    return {}


@pytest.fixture
def opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, configs: dict[ScriptedEngine, EngineConfig]
) -> list[str]:
    names: list[str] = []

    def open_engine(config: EngineConfig) -> ScriptedEngine:
        assert config.model is not None
        names.append(Path(config.model).name)
        engine = ScriptedEngine()
        configs[engine] = config
        return engine

    monkeypatch.setattr(registry, "open_local_engine", open_engine)
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    return names


def test_a_binding_loads_once_keeps_overrides_and_replaces_a_closed_engine(
    opened: list[str], configs: dict[ScriptedEngine, EngineConfig]
) -> None:
    binding = client.EngineBinding(model="a.gguf", settings={"n_seq_max": 2})
    assert binding.loaded() is None
    first = binding.get()
    assert binding.get() is first and binding.loaded() is first
    override = binding.get("b.gguf")
    for _ in range(4):
        assert binding.get("b.gguf") is override
    assert opened == ["a.gguf", "b.gguf"]
    first.close()
    assert binding.get() is not first
    assert opened == ["a.gguf", "b.gguf", "a.gguf"]
    again = binding.get()
    assert isinstance(again, ScriptedEngine) and configs[again].n_seq_max == 2


def test_the_last_holder_to_let_go_closes_the_engine(opened: list[str]) -> None:
    first = client.EngineBinding(model="a.gguf", settings={})
    second = client.EngineBinding(model="a.gguf", settings={})
    engine = first.get()
    assert second.get() is engine and opened == ["a.gguf"]
    first.close()
    assert not engine.closed
    second.close()
    assert engine.closed
    assert first.get() is not engine and opened == ["a.gguf", "a.gguf"]  # loads again
    first.close()


def test_keep_alive_keeps_an_engine_for_the_next_holder(opened: list[str]) -> None:
    kept = client.EngineBinding(model="a.gguf", settings={}, keep_alive=-1)
    engine = kept.get()
    kept.close()
    assert not engine.closed
    later = client.EngineBinding(model="a.gguf", settings={})
    assert later.get() is engine and opened == ["a.gguf"]
    later.close()
    assert engine.closed
    forever = client.EngineBinding(model="b.gguf", settings={}, keep_alive=-1)
    other = forever.get()
    forever.close()
    assert registry.unload_kept_engines() == 1 and other.closed


def test_a_collected_binding_lets_go(opened: list[str]) -> None:
    binding = client.EngineBinding(model="a.gguf", settings={})
    engine = binding.get()
    del binding
    gc.collect()
    assert engine.closed


async def test_a_binding_loads_off_the_event_loop(opened: list[str]) -> None:
    binding = client.EngineBinding(model="a.gguf", settings={})
    engine = await binding.aget()
    assert engine is binding.get() and opened == ["a.gguf"]


def test_an_engine_given_by_the_user_is_used_as_it_is(opened: list[str]) -> None:
    mine = ScriptedEngine()
    binding = client.EngineBinding(model=None, settings={}, engine=mine)
    assert binding.get() is mine and binding.loaded() is mine and opened == []
