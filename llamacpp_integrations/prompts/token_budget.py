"""Token lists against a length limit: kept, cut to the limit's head, or refused with a typed
error that names which input was too long. Pure Python, shared by the local and remote engines."""

from __future__ import annotations

from ..errors import ContextOverflowError

__all__ = ["fit_tokens"]


def fit_tokens(
    tokens: list[int],
    limit: int,
    *,
    truncate: bool,
    subject: str,
    taker: str,
    hint: str,
    request_id: str,
) -> list[int]:
    """``tokens`` when they fit in ``limit``; their first ``limit`` with ``truncate``; else raise
    ``ContextOverflowError`` reading "{subject} {n} tokens; {taker} at most {limit} ({hint})",
    e.g. subject "text 3 has", taker "embeddings take"."""
    if len(tokens) <= limit:
        return tokens
    if not truncate:
        raise ContextOverflowError(
            f"{subject} {len(tokens)} tokens; {taker} at most {limit} ({hint})",
            n_prompt_tokens=len(tokens),
            n_ctx=limit,
            request_id=request_id,
        )
    return tokens[:limit]
