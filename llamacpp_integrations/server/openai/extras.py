"""llama-server's token and template endpoints: ``/tokenize``, ``/detokenize``, ``/apply-template``.

They answer as llama-server's handlers do (``tools/server/server-context.cpp``), on the bare
paths it serves them on:

* ``POST /tokenize`` ``{content, add_special?, parse_special?, with_pieces?}`` ->
  ``{tokens: [ids]}``, or with ``with_pieces`` ``{tokens: [{id, piece}]}``, where a piece that is
  not whole UTF-8 (a byte-level vocabulary's part of a character) is its list of byte values.
  ``content`` may mix strings and token ids, as llama-server's does; special tokens are added
  only before a first string, and control-token text is read as tokens unless
  ``parse_special`` is false (llama-server's defaults: ``add_special`` false, ``parse_special``
  true);
* ``POST /detokenize`` ``{tokens}`` -> ``{content}``, control tokens' text included;
* ``POST /apply-template`` takes a chat completion body and answers ``{prompt}``: the prompt the
  chat endpoint would read for it, made the same way (its options, tools and reasoning asks, the
  client core's plan), so it is what ``usage.prompt_tokens`` counts.

Token ids are checked against the vocabulary first: llama.cpp aborts the process on one that is
not in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...engine import ChatRequest, InferenceEngine, TokenPieceEngine
from ..errors import invalid_request
from ..exchange import Exchange, Leases
from ..settings import ServerSettings
from .routes import chat_plan
from .schemas import ChatCompletionBody

__all__ = [
    "DetokenizeBody",
    "LlamaExtras",
    "TokenizeBody",
    "checked_tokens",
    "piece_of",
    "tokens_of",
]

TOKENIZE = "/tokenize"
DETOKENIZE = "/detokenize"
APPLY_TEMPLATE = "/apply-template"

Piece = str | list[int]


class TokenizeBody(BaseModel):
    """``POST /tokenize``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    content: str | list[str | int]
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeBody(BaseModel):
    """``POST /detokenize``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[int]


def _checked(engine: InferenceEngine, token: int, param: str) -> int:
    n_vocab = engine.info.n_vocab
    if not 0 <= token < n_vocab:
        raise invalid_request(
            f"{param}: {token} is not a token id of this model (0 to {n_vocab - 1})", param
        )
    return token


def checked_tokens(engine: InferenceEngine, tokens: Sequence[int], param: str) -> list[int]:
    """``tokens``, each checked to be in the model's vocabulary.

    Raises:
        ApiError: 400 naming the first id that is not (``param[i]``).
    """
    return [_checked(engine, token, f"{param}[{i}]") for i, token in enumerate(tokens)]


def tokens_of(engine: InferenceEngine, body: TokenizeBody) -> list[int]:
    """The token ids of ``body.content``, strings tokenized and ids kept, as llama-server's
    ``tokenize_mixed`` does (special tokens added only before a first string).

    Raises:
        ApiError: 400 naming an id of ``content`` that is not in the vocabulary.
    """
    if isinstance(body.content, str):
        parts: list[str | int] = [body.content]
    else:
        parts = body.content
    tokens: list[int] = []
    for index, part in enumerate(parts):
        if isinstance(part, int):
            tokens.append(_checked(engine, part, f"content[{index}]"))
            continue
        add_special = body.add_special and index == 0
        tokens += engine.tokenize(part, add_special=add_special, parse_special=body.parse_special)
    return tokens


def piece_of(engine: InferenceEngine, token: int) -> Piece:
    """A token's text, or its byte values where they are not whole UTF-8 (as llama-server
    answers ``with_pieces``); an engine that cannot give a token's bytes gives its text."""
    if not isinstance(engine, TokenPieceEngine):
        return engine.detokenize([token], special=True)
    raw = engine.token_piece(token)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


class LlamaExtras:
    """The handlers of llama-server's token and template endpoints."""

    def __init__(self, exchange: Exchange, settings: ServerSettings) -> None:
        self.exchange = exchange
        self.settings = settings

    async def tokenize(self, request: Request) -> Response:
        """``POST /tokenize``."""
        return await self.exchange.run(TOKENIZE, lambda leases: self._tokenize(request, leases))

    async def _tokenize(self, request: Request, leases: Leases) -> Response:
        body = await self.exchange.body(request, TokenizeBody)
        engine = (await leases.take(body.model)).engine

        def answer() -> list[int] | list[dict[str, int | Piece]]:
            tokens = tokens_of(engine, body)
            if not body.with_pieces:
                return tokens
            return [{"id": token, "piece": piece_of(engine, token)} for token in tokens]

        return JSONResponse({"tokens": await asyncio.to_thread(answer)})

    async def detokenize(self, request: Request) -> Response:
        """``POST /detokenize``."""
        return await self.exchange.run(DETOKENIZE, lambda leases: self._detokenize(request, leases))

    async def _detokenize(self, request: Request, leases: Leases) -> Response:
        body = await self.exchange.body(request, DetokenizeBody)
        engine = (await leases.take(body.model)).engine
        tokens = checked_tokens(engine, body.tokens, "tokens")
        content = await asyncio.to_thread(engine.detokenize, tokens, special=True)
        return JSONResponse({"content": content})

    async def apply_template(self, request: Request) -> Response:
        """``POST /apply-template``."""
        return await self.exchange.run(
            APPLY_TEMPLATE, lambda leases: self._apply_template(request, leases)
        )

    async def _apply_template(self, request: Request, leases: Leases) -> Response:
        body = await self.exchange.body(request, ChatCompletionBody)
        model = await leases.take(body.model)
        engine = model.engine
        # The chat endpoint's own plan: tools shown (or written into the system message),
        # the reasoning switch set, as its prompt is.
        build = chat_plan(body, model, self.settings)

        def render() -> str:
            chat = build().request
            assert isinstance(chat, ChatRequest)
            return engine.render_chat(chat)

        return JSONResponse({"prompt": await asyncio.to_thread(render)})
