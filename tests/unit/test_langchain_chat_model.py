"""ChatLlamaCpp's configuration surface, without generating anything (no weights are loaded)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableBinding, RunnableSequence
from pydantic import BaseModel
from typing_extensions import TypedDict

from llamacpp_integrations.engine import live_engines
from llamacpp_integrations.langchain import ChatLlamaCpp


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def bound_kwargs(runnable: Any) -> dict[str, Any]:
    assert isinstance(runnable, RunnableBinding)
    return dict(runnable.kwargs)


def test_construction_loads_nothing() -> None:
    before = len(live_engines())
    llm = ChatLlamaCpp(model="smollm2-135m", temperature=0, max_tokens=10, timeout=5)
    assert len(live_engines()) == before
    assert llm._get_ls_params() == {
        "ls_provider": "llamacpp",
        "ls_model_name": "smollm2-135m",
        "ls_model_type": "chat",
        "ls_temperature": 0,
        "ls_max_tokens": 10,
    }


def test_profile_comes_from_the_gguf_header() -> None:
    # What one request gets from the engine these settings make: SmolLM2's trained 8192
    # when 8 sequences of it fit the KV budget (23040 bytes a token), less when they do not;
    # in a unified cache, when that many cells fit once.
    per_token = 23040
    roomy = ChatLlamaCpp(model="smollm2-135m", kv_memory_budget=8 * 8192 * per_token).profile
    assert roomy is not None
    assert roomy["max_input_tokens"] == 8192
    assert roomy["tool_calling"] and roomy["structured_output"]
    assert roomy["image_inputs"] is False
    tight = ChatLlamaCpp(model="smollm2-135m", kv_memory_budget=8 * 1024 * per_token).profile
    assert tight is not None and tight["max_input_tokens"] == 1024
    unified = ChatLlamaCpp(
        model="smollm2-135m", kv_unified=True, kv_memory_budget=8 * 1024 * per_token
    ).profile
    assert unified is not None and unified["max_input_tokens"] == 8192
    assert (
        ChatLlamaCpp(model="smollm2-135m", n_ctx_per_seq=1000).profile["max_input_tokens"] == 1000
    )  # type: ignore[index]
    trained = ChatLlamaCpp(model="smollm2-135m", n_ctx_per_seq=0, kv_memory_budget=1).profile
    assert trained is not None and trained["max_input_tokens"] == 8192
    assert ChatLlamaCpp(model="/no/such/model.gguf").profile is None


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, None),
        ("auto", "auto"),
        ("none", "none"),
        ("any", "any"),
        ("required", "required"),
        (True, True),
        ("add", {"type": "function", "function": {"name": "add"}}),
        (
            {"type": "function", "function": {"name": "add"}},
            {"type": "function", "function": {"name": "add"}},
        ),
    ],
)
def test_bind_tools_keeps_every_tool_choice_spelling(choice: Any, expected: Any) -> None:
    kwargs = bound_kwargs(ChatLlamaCpp(model="smollm2-135m").bind_tools([add], tool_choice=choice))
    assert kwargs["tools"][0]["function"]["name"] == "add"
    assert kwargs.get("tool_choice") == expected


def test_bind_tools_parallel_flag() -> None:
    llm = ChatLlamaCpp(model="smollm2-135m")
    assert (
        bound_kwargs(llm.bind_tools([add], parallel_tool_calls=False))["parallel_tool_calls"]
        is False
    )
    assert "parallel_tool_calls" not in bound_kwargs(llm.bind_tools([add]))


class Person(BaseModel):
    name: str
    age: int


class PersonDict(TypedDict):
    name: str
    age: int


@pytest.mark.parametrize("schema", [Person, PersonDict, Person.model_json_schema()])
def test_structured_output_methods(schema: Any) -> None:
    llm = ChatLlamaCpp(model="smollm2-135m")
    chain = llm.with_structured_output(schema)
    assert isinstance(chain, RunnableSequence)
    format_ = bound_kwargs(chain.first)["response_format"]
    assert format_["type"] == "json_schema" and format_["schema"]["properties"].keys() == {
        "name",
        "age",
    }
    tools = bound_kwargs(llm.with_structured_output(schema, method="function_calling").first)
    assert tools["tool_choice"]["function"]["name"] == tools["tools"][0]["function"]["name"]
    assert tools["parallel_tool_calls"] is False
    # json_mode is held to the schema too when the schema converts to a grammar...
    mode = bound_kwargs(llm.with_structured_output(schema, method="json_mode").first)
    assert mode["response_format"]["type"] == "json_schema"
    with pytest.raises(ValueError, match="method"):
        llm.with_structured_output(schema, method="xml")  # type: ignore[arg-type]


def test_json_mode_with_an_inexpressible_schema_is_any_object() -> None:
    # ...and to any JSON object when it does not.
    schema = {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}
    llm = ChatLlamaCpp(model="smollm2-135m")
    mode = bound_kwargs(llm.with_structured_output(schema, method="json_mode").first)
    assert mode["response_format"] == {"type": "json_object"}
