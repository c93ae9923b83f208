"""One request's samplers in llama.cpp: penalties, bias, truncation, temperature, and a grammar.

The grammar is kept out of the chain. Applying a GBNF grammar to every token of the vocabulary
costs far more than a decode step, so (as llama.cpp's own sampling helper does) the chain picks a
token first and only that token is checked against the grammar; the whole vocabulary is filtered
by the grammar only when the pick is rejected, and the chain then picks again among what is left.
Penalties see only what this request generated (the prompt is not fed to them).

A greedy request that no penalty or bias changes builds no chain: its token is the first largest
logit, read from the row in place, which is what llama.cpp's greedy sampler picks (it too keeps
the first of equal maxima). When the grammar refuses that token, the best tokens of the row are
checked first (``_SHORTLIST`` of them, in the order greedy would take them) and the whole
vocabulary only when none of them is allowed or the best allowed one ties with a token outside
them: the token is the one the filtered vocabulary's argmax gives, for a small share of the
cost. Sampled requests keep llama.cpp's chain fed by
``llama_sampler_sample``, which copies the row into a buffer the chain owns and, with a
``top_k`` of up to 128, partially sorts it once; selecting the top candidates in numpy first
(``argpartition``) was measured several times slower than that, so it is not done here.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np

from ...errors import InvalidRequestError
from ..types import SamplingParams
from .runner import GenerationContext
from .weights import LoadedModel

__all__ = ["SamplerChain"]

# Tokens a greedy grammar request checks before the whole vocabulary: a structured answer's
# next token is nearly always among the row's best few.
_SHORTLIST = 64

# The layout of llama_token_data, so a numpy array can be handed to llama.cpp without copying.
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class SamplerChain:
    """The samplers owned by one request; ``sample`` also accepts the token it returns."""

    def __init__(
        self,
        model: LoadedModel,
        params: SamplingParams,
        *,
        grammar: str | None = None,
        grammar_triggers: Sequence[str] = (),
        request_id: str | None = None,
    ) -> None:
        self._chain: Any = None
        self._grammar = None
        # Greedy with nothing that changes the logits: the argmax of the row, no chain at all.
        self._argmax = params.greedy and not params.logit_bias and not _penalties_on(params)
        try:
            if not self._argmax:
                chain_params = llama_cpp.llama_sampler_chain_default_params()
                chain_params.no_perf = True
                self._chain = llama_cpp.llama_sampler_chain_init(chain_params)
                self._build(model, params)
            if grammar is not None:
                self._grammar = _init_grammar(model, grammar, grammar_triggers)
                if not self._grammar:
                    raise InvalidRequestError(
                        "the GBNF grammar does not parse (llama.cpp's parser names the line in "
                        "the debug log of 'llamacpp_integrations.llama_cpp')",
                        request_id=request_id,
                    )
                self._ids = np.arange(model.n_vocab, dtype=np.int32)
                self._candidates = np.empty(model.n_vocab, dtype=_TOKEN_DATA)
                self._one = np.empty(1, dtype=_TOKEN_DATA)
                self._shortlist = np.empty(min(_SHORTLIST, model.n_vocab), dtype=_TOKEN_DATA)
        except BaseException:
            self.close()
            raise

    def _add(self, sampler: int | None) -> None:
        if not sampler:
            raise InvalidRequestError("llama.cpp refused a sampler setting")
        llama_cpp.llama_sampler_chain_add(self._chain, sampler)

    def _build(self, model: LoadedModel, params: SamplingParams) -> None:
        if params.logit_bias:
            items = list(params.logit_bias.items())
            array = (llama_cpp.llama_logit_bias * len(items))()
            for slot, (token, bias) in zip(array, items, strict=True):
                slot.token = token
                slot.bias = bias
            self._add(llama_cpp.llama_sampler_init_logit_bias(model.n_vocab, len(items), array))
        if _penalties_on(params):
            self._add(
                llama_cpp.llama_sampler_init_penalties(
                    model.n_vocab,
                    params.penalty_last_n,
                    params.repeat_penalty,
                    params.frequency_penalty,
                    params.presence_penalty,
                )
            )
        if params.greedy:
            self._add(llama_cpp.llama_sampler_init_greedy())
            return
        if params.top_k > 0:
            self._add(llama_cpp.llama_sampler_init_top_k(params.top_k))
        if params.top_p < 1.0:
            self._add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
        if params.min_p > 0.0:
            self._add(llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
        self._add(llama_cpp.llama_sampler_init_temp(params.temperature))
        seed = llama_cpp.LLAMA_DEFAULT_SEED if params.seed is None else params.seed
        self._add(llama_cpp.llama_sampler_init_dist(seed))

    @property
    def reads_argmax(self) -> bool:
        """Whether the first pick is the row's argmax (greedy, nothing changing the logits):
        what ``sample`` can be given, worked out for a whole step at once."""
        return self._argmax

    def sample(
        self, context: GenerationContext, logits_index: int, argmax: int | None = None
    ) -> int:
        """Pick (and accept) the next token from row ``logits_index`` of the last decode;
        ``argmax``: that row's first largest logit, when already known."""
        if self._argmax:
            if self._grammar is None:
                if argmax is not None:
                    return argmax
                return int(context.logits_view(logits_index).argmax())
            logits = context.logits_view(logits_index)
            token = int(logits.argmax()) if argmax is None else argmax
        elif self._grammar is None:
            return int(llama_cpp.llama_sampler_sample(self._chain, context.handle, logits_index))
        else:
            logits = context.logits_view(logits_index)
            token = self._pick(logits, through_grammar=False)
        if not self._grammar_allows(token, float(logits[token])):
            best = self._best_allowed(logits) if self._chain is None else None
            token = self._pick(logits, through_grammar=True) if best is None else best
        llama_cpp.llama_sampler_accept(self._grammar, token)
        if self._chain is not None:
            llama_cpp.llama_sampler_accept(self._chain, token)
        return token

    def force(self, token: int) -> bool:
        """Take ``token`` as if sampled (the caller writes it); False, taking nothing, when
        the grammar does not allow it here."""
        if self._grammar is not None:
            if not self._grammar_allows(token, 0.0):
                return False
            llama_cpp.llama_sampler_accept(self._grammar, token)
        if self._chain is not None:
            llama_cpp.llama_sampler_accept(self._chain, token)
        return True

    def _pick(self, logits: np.ndarray, *, through_grammar: bool) -> int:
        candidates = self._candidates
        candidates["logit"] = logits
        candidates["id"] = self._ids  # the chain may have sorted them
        array = _as_token_data_array(candidates)
        if through_grammar:
            llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(array))
        if self._chain is None:  # greedy: the first largest logit the grammar left
            return int(candidates["logit"].argmax())
        llama_cpp.llama_sampler_apply(self._chain, ctypes.byref(array))
        return int(candidates["id"][array.selected])

    def _best_allowed(self, logits: np.ndarray) -> int | None:
        """Greedy's token under the grammar, found among the row's best tokens: the first of
        them (by logit, then id, as an argmax takes them) the grammar allows; ``None`` where
        only the whole vocabulary can tell (none allowed, or a tie at the shortlist's edge)."""
        short = self._shortlist
        k = len(short)
        top = np.argpartition(logits, -k)[-k:]
        ids = top[np.lexsort((top, -logits[top]))]
        short["id"], short["logit"], short["p"] = ids, logits[ids], 0.0
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(_as_token_data_array(short)))
        allowed = ~np.isinf(short["logit"])
        if not allowed.any():
            return None
        first = int(allowed.argmax())
        if logits[ids[first]] == logits[ids[-1]]:  # an equal logit outside may have a lower id
            return None
        return int(ids[first])

    def _grammar_allows(self, token: int, logit: float) -> bool:
        one = self._one
        one["id"], one["logit"], one["p"] = token, logit, 0.0
        array = _as_token_data_array(one)
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(array))
        return not math.isinf(float(one["logit"][0]))

    def __del__(self) -> None:
        self.close()  # a request dropped before the worker saw it still frees its samplers

    def close(self) -> None:
        for name in ("_chain", "_grammar"):
            sampler = getattr(self, name, None)
            if sampler:
                llama_cpp.llama_sampler_free(sampler)
                setattr(self, name, None)


def _penalties_on(params: SamplingParams) -> bool:
    """Whether a penalty sampler would change any logit."""
    return params.penalty_last_n != 0 and (
        params.repeat_penalty != 1.0
        or params.presence_penalty != 0.0
        or params.frequency_penalty != 0.0
    )


def _init_grammar(model: LoadedModel, grammar: str, triggers: Sequence[str]) -> Any:
    if not triggers:
        return llama_cpp.llama_sampler_init_grammar(model.vocab, grammar.encode("utf-8"), b"root")
    # A lazy grammar: llama.cpp leaves the output free until a pattern matches, then replays
    # the matched text into the grammar and constrains from there (see GenerationRequest).
    patterns = (ctypes.c_char_p * len(triggers))(*(t.encode("utf-8") for t in triggers))
    return llama_cpp.llama_sampler_init_grammar_lazy_patterns(
        model.vocab,
        grammar.encode("utf-8"),
        b"root",
        patterns,
        len(triggers),
        (llama_cpp.llama_token * 0)(),
        0,
    )


def _as_token_data_array(candidates: np.ndarray) -> llama_cpp.llama_token_data_array:
    return llama_cpp.llama_token_data_array(
        data=candidates.ctypes.data_as(llama_cpp.llama_token_data_p),
        size=len(candidates),
        selected=-1,
        sorted=False,
    )
