"""``GenerateBatches``: a Ray Data callable class that answers a prompt per row.

A row's prompt is a template over its columns (``"Summarize: {body}"``) or a column holding
the whole prompt, with the image in ``image_column`` after it when one is named; it is sent as
a chat (an optional system message, then the prompt as the
user's turn) through the same path as the chat adapters' calls (``client.CallSite``): the
answer is text, or, with ``schema``, JSON the grammar holds to that schema, parsed and (for a
pydantic class) validated, one output column per field, as ``with_structured_output`` gives
it; or, with ``tools``, the tool calls the model makes under the tool grammar.

All of a batch's rows are submitted to the actor's engine together, so they decode side by
side, and rows whose prompts start alike (the system message, the template's fixed text)
share that prefix's cells instead of reading it again (once it is a prefill block or longer).
"""

from __future__ import annotations

import string
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from ..client import CallSettings, CallSite, SamplingSettings
from ..client.plan import CallResult, ImageReader
from ..engine import InferenceEngine
from ..errors import ImageInputNotSupportedError, InvalidRequestError
from ..multimodal import ImageSource
from ..tools import normalize_tools
from .batch_engine import BatchJobSettings
from .batch_rows import (
    Batch,
    columns_of,
    json_cell,
    output_batch,
    row_count,
    run_rows,
    text_cell,
)

__all__ = ["BatchGenerationSettings", "GenerateBatches"]


class BatchGenerationSettings(SamplingSettings, CallSettings, BatchJobSettings):
    """The chat adapters' settings (sampling, per-call, engine), plus the batch job's."""

    max_tokens: int | None = Field(
        default=256, description="Most tokens generated per row (None: to the context's end)."
    )
    stop: list[str] | None = Field(default=None, description="Strings that end an answer.")
    max_retries: int = Field(
        default=2, ge=0, description="Retries of a row the engine refused for a full queue."
    )


Schema = type[BaseModel] | Mapping[str, Any]


class GenerateBatches:
    """Answers one prompt per row, for ``Dataset.map_batches``.

    Exactly one of ``template`` and ``prompt_column`` gives each row's prompt. Without
    ``schema`` or ``tools`` the answer's text goes to ``output_column``. With ``schema`` (a
    pydantic class or a JSON schema whose top level is an object), each of its properties gets
    a column (``output_prefix`` before its name); a schema without properties puts the whole
    value, as JSON text, in ``output_column``. With ``tools`` (OpenAI-style tool dicts), the
    answer's text goes to ``output_column`` and its calls, as JSON text (a list of
    ``{"name", "arguments"}``), to ``tool_calls_column``.

    With ``image_column``, each row's image (encoded bytes, or a data URI, base64, URL or path
    as ``image_policy`` allows: by default in-memory data only) follows its prompt in the
    user's turn; the model needs a projector (``mmproj``).

    A row that fails (a missing or empty template column, a prompt over the context, an image
    that does not load, an answer ``max_tokens`` cut before its JSON was whole, a value the
    pydantic class refuses)
    gets ``None`` in its result columns and its error in ``error_column``; the others keep
    theirs, in the input's order.

    Args:
        model: The model, as the adapters take it.
        template: A ``str.format`` template over the row's columns.
        prompt_column: A column holding each row's whole prompt.
        system: A system message put before every prompt.
        image_column: A column holding each row's image.
        schema: The structured answer's schema.
        tools: Tools the model may call (``tool_choice`` says whether it must).
        tool_choice: ``"auto"``, ``"required"``, ``"none"`` or a tool's name.
        output_column: The answer's text (or a property-less schema's JSON) column.
        output_prefix: Put before each schema property's column name.
        tool_calls_column: The tool calls' column.
        engine: An engine to use instead of loading one (in-process use and tests only).
        **settings: The chat adapters' settings (``temperature``, ``max_tokens``, ``seed``,
            ``n_ctx_per_seq``, ``n_seq_max``...), ``in_flight`` and ``error_column``; see
            ``BatchGenerationSettings``.

    Raises:
        InvalidRequestError: neither or both of ``template`` and ``prompt_column``, a template
            that does not parse, ``schema`` with ``tools``, or bad tools.
        pydantic.ValidationError: a setting that does not exist or has a bad value.

    Example::

        class Person(BaseModel):
            name: str
            age: int

        people = ds.map_batches(
            GenerateBatches,
            fn_constructor_kwargs={
                "model": "smollm2-135m",
                "template": "Who is described here? {bio}",
                "schema": Person,
            },
            batch_size=32,
            compute=ray.data.ActorPoolStrategy(size=2),
            num_cpus=1,
        )  # columns: bio, name, age, error
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        template: str | None = None,
        prompt_column: str | None = None,
        system: str | None = None,
        image_column: str | None = None,
        schema: Schema | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: object = "auto",
        output_column: str = "generated",
        output_prefix: str = "",
        tool_calls_column: str = "tool_calls",
        engine: InferenceEngine | None = None,
        **settings: Any,
    ) -> None:
        if (template is None) == (prompt_column is None):
            raise InvalidRequestError("give exactly one of template and prompt_column")
        if schema is not None and tools is not None:
            raise InvalidRequestError("give schema or tools, not both: they fill other columns")
        self.fields = [] if template is None else _template_fields(template)
        self.template = template
        self.prompt_column = prompt_column
        self.system = system
        self.image_column = image_column
        self.schema = schema
        self.output_column = output_column
        self.output_prefix = output_prefix
        self.tool_calls_column = tool_calls_column
        self.settings = BatchGenerationSettings(model=model, **settings)
        self._call: dict[str, Any] = {}
        if schema is not None:
            self._call["response_format"] = schema
        if tools is not None:
            normalize_tools(list(tools))  # bad tools fail here, not on every row
            self._call |= {"tools": list(tools), "tool_choice": tool_choice}
        self.engine = self.settings.load(engine)
        self._site = CallSite.of(self.settings, "GenerateBatches")
        self._site.options(self._call)  # a bad schema fails here, not on every row
        self._properties = _properties(schema)

    def __call__(self, batch: Batch) -> dict[str, np.ndarray]:
        """The batch with the answers' columns and ``error_column`` added."""
        columns = columns_of(batch)
        calls = [self._row(columns, row) for row in range(row_count(columns))]
        outcomes = run_rows(calls, in_flight=self.settings.in_flight)
        results = self._columns([outcome.value for outcome in outcomes])
        errors = [outcome.error for outcome in outcomes]
        return output_batch(
            batch, columns, results, errors, error_column=self.settings.error_column
        )

    def prompt(self, columns: Mapping[str, Sequence[Any]], row: int) -> str:
        """Row ``row``'s prompt (``InvalidRequestError`` for a missing or non-text column)."""
        if self.template is None:
            assert self.prompt_column is not None
            return text_cell(columns, self.prompt_column, row)
        values = {name: _cell(columns, name, row) for name in self.fields}
        return self.template.format_map(values)

    def _row(
        self, columns: Mapping[str, Sequence[Any]], row: int
    ) -> Callable[[], Awaitable[CallResult | Any]]:
        def messages_of(read_image: ImageReader | None) -> list[dict[str, Any]]:
            # Runs where the executor reads images (a thread for async calls): a URL's fetch
            # or a large decode never holds up the other rows on the loop.
            content: str | list[dict[str, Any]] = self.prompt(columns, row)
            if self.image_column is not None:
                source = _image_cell(columns, self.image_column, row)
                if read_image is None:
                    raise ImageInputNotSupportedError(
                        "this model has no image projector (mmproj), so it cannot read the "
                        f"images in column {self.image_column!r}"
                    )
                content = [{"type": "text", "text": content}]
                content.append({"type": "image", "image": read_image(source)})
            messages = [{"role": "user", "content": content}]
            if self.system is not None:
                messages.insert(0, {"role": "system", "content": self.system})
            return messages

        async def call() -> CallResult | Any:
            prepared = self._site.prepare(self._call, messages_of)
            result = await prepared.agenerate()
            if isinstance(self.schema, type):  # a pydantic class checks what the grammar let by
                return self.schema.model_validate(result.value).model_dump(mode="json")
            return result

        return call

    def _columns(self, answers: Sequence[CallResult | Any]) -> dict[str, list[Any]]:
        """The result columns of the answers (``None`` where a row failed)."""
        if self.schema is not None:
            values = [a.value if isinstance(a, CallResult) else a for a in answers]
            if not self._properties:
                return {self.output_column: [None if v is None else json_cell(v) for v in values]}
            return {
                self.output_prefix + name: [_get(value, name) for value in values]
                for name in self._properties
            }
        texts = [None if a is None else a.content for a in answers]
        if "tools" not in self._call:
            return {self.output_column: texts}
        calls = [
            None if a is None else json_cell([_call_dict(c) for c in a.tool_calls]) for a in answers
        ]
        return {self.output_column: texts, self.tool_calls_column: calls}


def _template_fields(template: str) -> list[str]:
    """The columns a template names (``InvalidRequestError`` if it does not parse)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise InvalidRequestError(f"the prompt template does not parse: {error}") from None
    names: list[str] = []
    for _, name, _, _ in parsed:
        if name is None:
            continue
        if not name or not name.isidentifier():
            raise InvalidRequestError(
                f"the prompt template's fields must name columns ({{column}}), not {name!r}"
            )
        names.append(name)
    return list(dict.fromkeys(names))


def _cell(columns: Mapping[str, Sequence[Any]], name: str, row: int) -> object:
    """A template's value: text as it is, other values (numbers) as they print; a missing
    column or value is the row's ``InvalidRequestError``."""
    try:
        return text_cell(columns, name, row)
    except InvalidRequestError:
        value = columns[name][row] if name in columns else None
        if value is None or (isinstance(value, float) and value != value):  # NaN: missing
            raise
        return value


def _image_cell(columns: Mapping[str, Sequence[Any]], name: str, row: int) -> ImageSource:
    """A row's image source: encoded bytes as they are, a string as ``image_policy`` reads it
    (a data URI, base64, URL or path); a missing column or value is the row's
    ``InvalidRequestError``."""
    if name not in columns:
        raise InvalidRequestError(
            f"the batch has no column {name!r} (columns: {', '.join(sorted(columns))})"
        )
    value = columns[name][row]
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str) and value:
        return value
    shown = "a missing value" if value is None or value == "" else f"a {type(value).__name__}"
    raise InvalidRequestError(f"column {name!r} holds {shown}, not an image")


def _properties(schema: Schema | None) -> list[str]:
    if schema is None:
        return []
    document = schema.model_json_schema() if isinstance(schema, type) else schema
    properties = document.get("properties")
    return list(properties) if isinstance(properties, Mapping) else []


def _get(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, Mapping) else None


def _call_dict(call: Any) -> dict[str, Any]:
    return {"name": call.name, "arguments": call.arguments}
