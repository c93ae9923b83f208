"""``None`` is a value: a call keyword left out (or ``UNSET``) keeps the adapter's default, and
``max_tokens=None`` lifts the limit, on every call path of both adapters. What the engine
receives is checked: ``GenerationRequest.max_tokens=None`` runs to the end of the sequence's
context."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage

from llamacpp_integrations import client
from llamacpp_integrations.engine import SamplingParams
from llamacpp_integrations.errors import InvalidRequestError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp

from .tiny_model import tiny_engine

DEFAULTS = {"temperature": 0.5, "max_tokens": 10, "stop": ["\n"], "seed": 7}
LLAMA_INDEX_PATHS = [
    "complete",
    "acomplete",
    "stream_complete",
    "astream_complete",
    "chat",
    "achat",
    "stream_chat",
    "astream_chat",
]
LANGCHAIN_PATHS = ["invoke", "ainvoke", "stream", "astream"]


def merge(kwargs: dict[str, Any]) -> client.CallOptions:
    return client.CallOptions.merge(DEFAULTS, kwargs, owner="X")


# -- the merge -------------------------------------------------------------------------------------


def test_a_keyword_left_out_or_unset_keeps_the_default() -> None:
    for options in (merge({}), merge(dict.fromkeys(DEFAULTS, client.UNSET))):
        assert options.max_tokens == 10 and options.stop == ("\n",)
        assert options.sampling.temperature == 0.5 and options.sampling.seed == 7


def test_none_means_none_for_the_options_that_have_one() -> None:
    options = merge({"max_tokens": None, "stop": None, "seed": None, "timeout": None})
    assert options.max_tokens is None  # no limit
    assert options.stop == () and options.sampling.seed is None and options.timeout is None
    assert {"max_tokens", "stop", "seed", "timeout"} <= client.NULLABLE_OPTIONS


@pytest.mark.parametrize("name", ["temperature", "top_k", "parallel_tool_calls"])
def test_none_is_refused_where_an_option_has_no_none(name: str) -> None:
    assert name not in client.NULLABLE_OPTIONS
    with pytest.raises(InvalidRequestError, match=f"{name}=None"):
        merge({name: None})


def test_sampling_options_nobody_names_are_the_engines_defaults() -> None:
    assert client.CallOptions.merge({}, {}, owner="X").sampling == SamplingParams()


def test_or_default_reads_the_sentinel_only() -> None:
    assert client.or_default(client.UNSET, 3) == 3
    assert client.or_default(None, 3) is None
    assert repr(client.UNSET) == "UNSET"


# -- LlamaIndex: the 256-token default and every path ----------------------------------------------


async def _call_llama_index(llm: LlamaCpp, path: str, **kwargs: Any) -> None:
    prompt: Any = "hi" if "complete" in path else [ChatMessage(role="user", content="hi")]
    result = getattr(llm, path)(prompt, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    if inspect.isasyncgen(result):
        _ = [piece async for piece in result]
    elif inspect.isgenerator(result):
        _ = list(result)


@pytest.mark.parametrize("path", LLAMA_INDEX_PATHS)
async def test_llama_index_max_tokens_none_lifts_the_default(path: str) -> None:
    engine = tiny_engine()
    llm = LlamaCpp(engine=engine)
    await _call_llama_index(llm, path)
    assert engine.requests[-1].max_tokens == 256  # left out: LlamaIndex's default
    await _call_llama_index(llm, path, max_tokens=None)
    assert engine.requests[-1].max_tokens is None  # no limit
    await _call_llama_index(llm, path, max_tokens=client.UNSET)
    assert engine.requests[-1].max_tokens == 256
    await _call_llama_index(llm, path, max_tokens=9)
    assert engine.requests[-1].max_tokens == 9


# -- LangChain: every path, and LangChain's own stop=None ------------------------------------------


async def _call_langchain(llm: ChatLlamaCpp, path: str, **kwargs: Any) -> None:
    result = getattr(llm, path)("hi", **kwargs)
    if inspect.isawaitable(result):
        await result
    elif inspect.isasyncgen(result):
        _ = [chunk async for chunk in result]
    else:
        _ = list(result) if inspect.isgenerator(result) else result


@pytest.mark.parametrize("path", LANGCHAIN_PATHS)
async def test_langchain_max_tokens_none_lifts_the_field(path: str) -> None:
    engine = tiny_engine()
    llm = ChatLlamaCpp(engine=engine, max_tokens=32, stop=["END"])  # type: ignore[call-arg]
    await _call_langchain(llm, path)
    sent = engine.requests[-1]
    # LangChain passes stop=None when a call names none: the field's stop strings apply.
    assert sent.max_tokens == 32 and sent.stop == ("END",)
    await _call_langchain(llm, path, max_tokens=None)
    assert engine.requests[-1].max_tokens is None
    await _call_langchain(llm, path, max_tokens=client.UNSET, stop=["X"])
    assert engine.requests[-1].max_tokens == 32 and engine.requests[-1].stop == ("X",)


def test_langsmith_params_read_the_sentinel() -> None:
    llm = ChatLlamaCpp(engine=tiny_engine(), model="m", max_tokens=32, temperature=0.1)
    params = llm._get_ls_params(max_tokens=client.UNSET, temperature=client.UNSET)
    assert params["ls_max_tokens"] == 32 and params["ls_temperature"] == 0.1
    assert "ls_max_tokens" not in llm._get_ls_params(max_tokens=None)
