"""``with_structured_output`` for ``ChatLlamaCpp``: the bound model and the parser of its answers.

``json_schema`` and ``json_mode`` bind a ``response_format`` (a grammar from the schema);
``function_calling`` binds the schema as the one tool the model must call. An answer cut by
``max_tokens`` raises ``OutputTruncatedError`` (or, with ``include_raw``, is the
``parsing_error``) instead of being parsed as if it were whole.

The model is any LangChain ``BaseChatModel`` whose calls take ``response_format`` and whose
``bind_tools`` takes ``tool_choice`` and ``parallel_tool_calls`` (as ``ChatLlamaCpp``'s do), so
this module does not import the chat model that uses it.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, cast

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import (
    JsonOutputKeyToolsParser,
    PydanticToolsParser,
)
from langchain_core.outputs import Generation
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import BaseModel

from ..errors import OutputTruncatedError, SchemaNotSupportedError
from ..tools import schema_to_gbnf

__all__ = ["structured_output"]


class _WholeAnswers:
    """Parses only answers ``max_tokens`` did not cut: LangChain's JSON parsers would read a
    cut document leniently and close it, turning "the answer ran out" into a confusing
    validation error, or into a value missing what was cut. Streamed partial objects still
    come as the answer grows."""

    def parse_result(self, result: list[Generation], *, partial: bool = False) -> Any:
        if not partial:
            message = getattr(result[0], "message", None) if result else None
            metadata = getattr(message, "response_metadata", {}) or {}
            if metadata.get("finish_reason") == "length":
                raise OutputTruncatedError(
                    "max_tokens ended the structured answer before it was whole",
                    request_id=getattr(message, "id", None),
                    partial_text=str(getattr(message, "content", "")),
                )
        return super().parse_result(result, partial=partial)  # type: ignore[misc]


class _JsonParser(_WholeAnswers, JsonOutputParser):
    pass


class _PydanticParser(_WholeAnswers, PydanticOutputParser):  # type: ignore[type-arg]
    pass


class _KeyToolsParser(_WholeAnswers, JsonOutputKeyToolsParser):
    pass


class _PydanticToolsParser(_WholeAnswers, PydanticToolsParser):
    pass


def structured_output(
    llm: BaseChatModel, schema: dict[str, Any] | type, method: str, *, include_raw: bool
) -> Runnable[LanguageModelInput, dict[str, Any] | BaseModel]:
    """``llm`` bound to answer in ``schema`` by ``method``, then the answer parsed."""
    is_pydantic = isinstance(schema, type) and is_basemodel_subclass(schema)
    ls_format = {"kwargs": {"method": method}, "schema": schema}
    parser: Runnable[Any, Any]
    if method == "function_calling":
        tool_name = convert_to_openai_tool(schema)["function"]["name"]
        bound = llm.bind_tools(
            [schema],
            tool_choice=tool_name,
            parallel_tool_calls=False,
            ls_structured_output_format=ls_format,
        )
        if is_pydantic:
            parser = _PydanticToolsParser(tools=[cast(type, schema)], first_tool_only=True)
        else:
            parser = _KeyToolsParser(key_name=tool_name, first_tool_only=True)
    elif method in ("json_schema", "json_mode"):
        response_format = _response_format(schema, method)
        bound = llm.bind(response_format=response_format, ls_structured_output_format=ls_format)
        if is_pydantic:
            parser = _PydanticParser(pydantic_object=cast(type[BaseModel], schema))
        else:
            parser = _JsonParser()
    else:
        raise ValueError(
            f"method must be 'json_schema', 'function_calling' or 'json_mode', not {method!r}"
        )
    if not include_raw:
        return bound | parser
    parse_or_none = RunnablePassthrough.assign(
        parsed=itemgetter("raw") | parser, parsing_error=lambda _: None
    ).with_fallbacks(
        [RunnablePassthrough.assign(parsed=lambda _: None)], exception_key="parsing_error"
    )
    return RunnableMap(raw=bound) | parse_or_none


def _response_format(schema: dict[str, Any] | type, method: str) -> dict[str, Any]:
    """``json_schema``: the grammar from the schema. ``json_mode``: a JSON object, held to the
    schema too when it converts to a grammar (still a JSON object, and one that parses)."""
    json_schema = _json_schema_of(schema)
    if method == "json_mode":
        try:
            schema_to_gbnf(json_schema)
        except SchemaNotSupportedError:
            return {"type": "json_object"}
    return {"type": "json_schema", "schema": json_schema}


def _json_schema_of(schema: dict[str, Any] | type) -> dict[str, Any]:
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return cast(type[BaseModel], schema).model_json_schema()
    if isinstance(schema, dict) and schema.get("type") == "function" and "function" in schema:
        return dict(schema["function"].get("parameters") or {"type": "object"})
    if isinstance(schema, dict) and "parameters" in schema and "name" in schema:
        return dict(schema["parameters"])  # an OpenAI function without the wrapper
    if isinstance(schema, dict):
        return schema  # a JSON schema already
    return convert_to_json_schema(schema)
