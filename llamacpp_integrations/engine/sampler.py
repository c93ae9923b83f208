"""One request's sampler chain in llama.cpp (grammar, penalties, bias, truncation, temperature)."""

from __future__ import annotations

import llama_cpp

from ..errors import InvalidRequestError
from .runner import GenerationContext, LoadedModel
from .types import SamplingParams

__all__ = ["SamplerChain"]


class SamplerChain:
    """A ``llama_sampler`` chain owned by one request; sampling also accepts the token.

    The grammar goes first so truncation samplers only ever see tokens the grammar allows; the
    penalties see only what this request generated (the prompt is not fed to them).
    """

    def __init__(
        self,
        model: LoadedModel,
        params: SamplingParams,
        *,
        grammar: str | None = None,
        request_id: str | None = None,
    ) -> None:
        chain_params = llama_cpp.llama_sampler_chain_default_params()
        chain_params.no_perf = True
        self._chain = llama_cpp.llama_sampler_chain_init(chain_params)
        try:
            self._build(model, params, grammar, request_id)
        except BaseException:
            self.close()
            raise

    def _add(self, sampler: int | None) -> None:
        if not sampler:
            raise InvalidRequestError("llama.cpp refused a sampler setting")
        llama_cpp.llama_sampler_chain_add(self._chain, sampler)

    def _build(
        self,
        model: LoadedModel,
        params: SamplingParams,
        grammar: str | None,
        request_id: str | None,
    ) -> None:
        if params.logit_bias:
            items = list(params.logit_bias.items())
            array = (llama_cpp.llama_logit_bias * len(items))()
            for slot, (token, bias) in zip(array, items, strict=True):
                slot.token = token
                slot.bias = bias
            self._add(llama_cpp.llama_sampler_init_logit_bias(model.n_vocab, len(items), array))
        if grammar is not None:
            sampler = llama_cpp.llama_sampler_init_grammar(
                model.vocab, grammar.encode("utf-8"), b"root"
            )
            if not sampler:
                raise InvalidRequestError(
                    "the GBNF grammar does not parse (llama.cpp's parser names the line in the "
                    "debug log of 'llamacpp_integrations.llama_cpp')",
                    request_id=request_id,
                )
            self._add(sampler)
        penalties_on = (
            params.repeat_penalty != 1.0
            or params.presence_penalty != 0.0
            or params.frequency_penalty != 0.0
        )
        if penalties_on and params.penalty_last_n != 0:
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

    def sample(self, context: GenerationContext, logits_index: int) -> int:
        """Pick (and accept) the next token from row ``logits_index`` of the last decode."""
        return int(llama_cpp.llama_sampler_sample(self._chain, context.handle, logits_index))

    def __del__(self) -> None:
        self.close()  # a request dropped before the worker saw it still frees its chain

    def close(self) -> None:
        if getattr(self, "_chain", None):
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None
