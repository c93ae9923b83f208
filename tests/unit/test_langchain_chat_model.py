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
    profile = ChatLlamaCpp(model="smollm2-135m").profile
    assert profile is not None
    # What one request gets from the engine: n_ctx_per_seq's default (2048), not SmolLM2's
    # trained 8192, which a prompt sized by the profile would overflow.
    assert profile["max_input_tokens"] == 2048
    assert profile["tool_calling"] and profile["structured_output"]
    assert profile["image_inputs"] is False
    assert (
        ChatLlamaCpp(model="smollm2-135m", n_ctx_per_seq=1024).profile["max_input_tokens"] == 1024
    )  # type: ignore[index]
    capped = ChatLlamaCpp(model="smollm2-135m", n_ctx_per_seq=0).profile
    assert capped is not None and capped["max_input_tokens"] == 4096  # trained, capped
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
