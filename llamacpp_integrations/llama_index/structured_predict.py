"""LlamaIndex's structured prediction, answered under a grammar built from the output class.

``structured_predict`` and its three twins ask ``chat`` for a ``response_format`` (the class's
JSON schema as a grammar) instead of LlamaIndex's default tool-call round trip or free-text
parsing, so every answer validates whatever the model. Events fire as LlamaIndex's own
implementation fires them: streams report their start when iteration begins.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Sequence
from typing import TYPE_CHECKING, Any, cast

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
)
from llama_index.core.prompts.base import BasePromptTemplate
from llama_index.core.types import Model

from .streaming import StructuredPrediction

if TYPE_CHECKING:
    from llama_index.core.program.utils import FlexibleModel

__all__ = ["GrammarStructuredPredict"]


class GrammarStructuredPredict:
    """Structured-predict methods for an LLM whose ``chat`` takes ``response_format``."""

    if TYPE_CHECKING:  # provided by the LLM class this is mixed into

        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse: ...

        async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse: ...

        def stream_chat(
            self, messages: Sequence[ChatMessage], **kwargs: Any
        ) -> ChatResponseGen: ...

        async def astream_chat(
            self, messages: Sequence[ChatMessage], **kwargs: Any
        ) -> ChatResponseAsyncGen: ...

        def _get_messages(
            self, prompt: BasePromptTemplate, **prompt_args: Any
        ) -> list[ChatMessage]: ...

    def _structured_chat(
        self,
        output_cls: type[Model],
        prompt: BasePromptTemplate,
        llm_kwargs: dict[str, Any] | None,
        prompt_args: dict[str, Any],
    ) -> tuple[list[ChatMessage], dict[str, Any]]:
        """The messages and keywords of the ``chat`` that answers in ``output_cls``."""
        messages = self._get_messages(prompt, **prompt_args)
        return messages, {"response_format": output_cls, **(llm_kwargs or {})}

    def structured_predict(
        self,
        output_cls: type[Model],
        prompt: BasePromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model:
        """An ``output_cls`` instance generated under a grammar built from its JSON schema (no
        tool-call round trip, no free-text parsing).

        Raises:
            OutputTruncatedError: ``max_tokens`` ran out inside the JSON answer.
            SchemaNotSupportedError: the schema has a part no grammar here can express.
        """
        prediction = StructuredPrediction(output_cls, prompt, prompt_args)
        prediction.start()
        messages, kwargs = self._structured_chat(output_cls, prompt, llm_kwargs, prompt_args)
        return cast(Model, prediction.whole(self.chat(messages, **kwargs)))

    async def astructured_predict(
        self,
        output_cls: type[Model],
        prompt: BasePromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model:
        """Async :meth:`structured_predict`."""
        prediction = StructuredPrediction(output_cls, prompt, prompt_args)
        prediction.start()
        messages, kwargs = self._structured_chat(output_cls, prompt, llm_kwargs, prompt_args)
        return cast(Model, prediction.whole(await self.achat(messages, **kwargs)))

    def stream_structured_predict(
        self,
        output_cls: type[Model],
        prompt: BasePromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Generator[Model | FlexibleModel, None, None]:
        """Partial objects as the constrained JSON streams: ``output_cls`` instances once what
        came validates, ``FlexibleModel`` s with the fields so far before; the last one is the
        complete ``output_cls`` instance."""
        prediction = StructuredPrediction(output_cls, prompt, prompt_args)
        messages, kwargs = self._structured_chat(output_cls, prompt, llm_kwargs, prompt_args)

        def objects() -> Generator[Any, None, None]:
            prediction.start()
            for response in self.stream_chat(messages, **kwargs):
                yield from prediction.updates(response)
            yield from prediction.finished()

        return objects()

    async def astream_structured_predict(
        self,
        output_cls: type[Model],
        prompt: BasePromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> AsyncGenerator[Model | FlexibleModel, None]:
        """Async :meth:`stream_structured_predict`."""
        prediction = StructuredPrediction(output_cls, prompt, prompt_args)
        messages, kwargs = self._structured_chat(output_cls, prompt, llm_kwargs, prompt_args)

        async def objects() -> AsyncGenerator[Any, None]:
            prediction.start()
            async for response in await self.astream_chat(messages, **kwargs):
                for update in prediction.updates(response):
                    yield update
            for final in prediction.finished():
                yield final

        return objects()
