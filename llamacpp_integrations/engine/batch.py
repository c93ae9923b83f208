"""One sequence's share of a batched decode, and the layout of a prompt's evaluation.

The scheduler plans ``BatchEntry`` s and the runner decodes them. How a prompt is cut into
entries is fixed here, because llama.cpp's CPU kernels round differently for different batch
shapes (a one-row decode and a 64-row one, flash attention's tiled path for many rows): if a
prompt's cells depended on where the batch budget or a cache hit happened to cut it, the same
request would get other greedy tokens the second time. So a prompt of ``n`` positions is always
read the same way: text in chunks that end at the layout's edges (multiples of ``block``
positions, and finer ones inside the first block), or where an image starts, each chunk whole in
one decode. A kept prefix (from the slot's cache, another slot, or the disk) ends on such an
edge, so the cells it holds are exactly those evaluating it again would make.

The last token is read alone in a decode of its own when more than ``SHORT_TAIL`` tokens
follow the last edge: then the same prompt asked again keeps every cell but that token's. A
chat's prompt is the exception: it ends with the assistant's header, an edge (below), and its
question is read with that header in one decode, last token included. The same prompt asked
again reads its question again; a new question, far more common, gets its first token sooner.
Each decode reads every weight once (about 5 ms on the tiny model on 2 cores, before its
tokens' own cost).

The first block has an edge halfway too (``LEAD_PARTS``), until a turn has ended: a prompt
without a turn end in its first 64 positions (a template that opens with the user's turn, a
raw completion) keeps 32 of a shared beginning of 32 to 63 tokens instead of none. Finer lead
edges (every 8, as this layout first had) kept a little more of a short shared beginning but
read every such prompt's first block in eight decodes, which showed in Gemma's long prompt read
(``benchmarks/single_stream.py``) against the same read in one decode; halfway edges do not. A
chat's system prompt and template preamble are kept at the turn edges below whatever the lead
edges.

A chat turn's end is an edge too (``marks``, the model's end-of-turn tokens). Chats over one
system prompt share it up to that token and the next turn's header, and with edges only every
64 positions each new question would read again the system prompt's tail after its last block
edge (up to 63 tokens, every chat). Where the model's turn headers end with a line break
(``header_ends``: ChatML's ``<|im_start|>user\n``, Gemma's, Llama 3's), the edge falls after
the header that follows the turn's end, not right after the mark: every chat shares that
header too, a new question is then read in one decode (its text, its turn's end and the
assistant's header), and a chat's prompt ends on an edge, so a follow-up turn keeps all of it.
Once a turn has ended, the lead edges stop: the shared preamble is behind that edge, and cutting
a question finer only delays its first token. Where edges fall is still a function
of the tokens before them alone (a position, whether a turn ended before it, the tokens since
the last turn end), so two prompts that share a prefix are cut the same way inside it, and a
prefix kept up to an edge holds the cells reading the prompt alone would make.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "HEADER_SPAN",
    "LEAD_PARTS",
    "SHORT_TAIL",
    "BatchEntry",
    "PrefillLayout",
    "common_prefix",
]

# The first block of a prompt is cut into this many chunks until a turn has ended (see the
# module docstring).
LEAD_PARTS = 2

# A prompt whose last edge is at most this many tokens before its end reads that tail, last
# token included, in one decode (see the module docstring): an empty think block after the
# assistant's header fits.
SHORT_TAIL = 10

# How far after a turn-end token the next turn's header may end (SmolLM2's ChatML: the newline,
# <|im_start|>, "ass", "istant", then the header's own newline, 5 tokens; Llama 3: 4).
HEADER_SPAN = 8


@dataclass
class BatchEntry:
    """Tokens of one sequence for one decode, starting at position ``start_pos``.

    With ``logits_last`` the last token's logits are kept; the runner then sets
    ``logits_index`` to its row in the decode's output. With ``logits_all`` (a speculating
    sequence: its next token and its drafts) every token's logits are kept, in rows
    ``first_index`` to ``logits_index``.
    """

    seq_id: int
    tokens: Sequence[int]
    start_pos: int
    logits_last: bool
    logits_index: int = -1
    logits_all: bool = False
    first_index: int = -1

    @property
    def end_pos(self) -> int:
        """The position after the entry's last token."""
        return self.start_pos + len(self.tokens)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class PrefillLayout:
    """Where a prompt's chunks end, and how much of a cached prefix a prompt may keep.

    ``block`` of ``0`` turns the alignment off: chunks take what the batch has room for and a
    prompt keeps every cached token it shares (faster to reuse, but a cached repeat may then
    answer differently). Without ``exact_keeps`` chunks are still aligned (so requests reading
    one prefix can share its cells at block edges), but a prompt keeps every cached token it
    shares: in a unified KV cache, where the cells lie changes an answer's rounding anyway.
    ``lead_step`` (a divisor of ``block``; ``0``: none) adds an edge every ``lead_step``
    positions inside the first block, up to the first of ``marks``. ``marks`` (token ids: the
    model's end-of-turn tokens) add an edge after each turn: right after the mark, or with
    ``header_ends`` (the tokens a turn's header ends with: line breaks) after the header of the
    turn that follows it. The methods that place edges then take the tokens (``tokens``: at
    least those before the positions asked about).
    """

    block: int
    exact_keeps: bool = True
    lead_step: int = 0
    marks: frozenset[int] = field(default_factory=frozenset)
    header_ends: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.lead_step and (self.lead_step < 0 or self.block % self.lead_step):
            raise ValueError(f"lead_step {self.lead_step} does not divide block {self.block}")

    @classmethod
    def with_lead_edges(
        cls,
        block: int,
        *,
        exact_keeps: bool = True,
        marks: frozenset[int] = frozenset(),
        header_ends: frozenset[int] = frozenset(),
    ) -> PrefillLayout:
        """A layout of ``block`` whose first block has an edge every ``block // LEAD_PARTS``
        positions up to the first of ``marks`` (none when that does not divide the block
        evenly), and one after each turn (``marks``, ``header_ends``: as the class says)."""
        step = block // LEAD_PARTS if block >= LEAD_PARTS and block % LEAD_PARTS == 0 else 0
        return cls(
            block, exact_keeps=exact_keeps, lead_step=step, marks=marks, header_ends=header_ends
        )

    @property
    def aligned(self) -> bool:
        return self.block > 0

    def edge_at_or_below(self, n: int, tokens: Sequence[int] = ()) -> int:
        """The last chunk edge at or before position ``n`` (``0`` when there is none)."""
        if self.lead_step and n < self.block:
            edge = min(n, self._lead_end(tokens, n)) // self.lead_step * self.lead_step
        else:
            edge = n // self.block * self.block
        if self.marks:
            # The last turn edge after that one (a short scan: less than a block and a header).
            for i in range(min(n, len(tokens)) - 1, max(0, edge - HEADER_SPAN - 1) - 1, -1):
                if tokens[i] in self.marks:
                    turn = self._turn_edge(i, tokens)
                    if turn is not None and edge < turn <= n:
                        return turn  # a later turn's edge lies further on
        return edge

    def next_edge(self, start: int, tokens: Sequence[int] = ()) -> int:
        """The first chunk edge after position ``start``."""
        edge = (start // self.block + 1) * self.block
        if self.lead_step and start < self.block:
            lead = (start // self.lead_step + 1) * self.lead_step
            if self._lead_end(tokens, lead) == lead:  # no turn ended before it
                edge = lead
        if self.marks:
            for i in range(max(0, start - HEADER_SPAN - 1), min(edge - 1, len(tokens))):
                if tokens[i] in self.marks:
                    turn = self._turn_edge(i, tokens)
                    if turn is not None and start < turn < edge:
                        return turn
        return edge

    def _turn_edge(self, mark: int, tokens: Sequence[int]) -> int | None:
        """The edge of the turn whose end is the token at ``mark``: right after it, or, with
        ``header_ends``, right after the next turn's header, the first header end within
        ``HEADER_SPAN`` tokens that is not the token right after the mark (the line break
        between turns); ``None`` when none is among ``tokens`` (another mark first, or too
        far). It depends on the tokens before it alone."""
        if not self.header_ends:
            return mark + 1
        for i in range(mark + 2, min(mark + 1 + HEADER_SPAN, len(tokens))):
            if tokens[i] in self.header_ends:
                return i + 1
            if tokens[i] in self.marks:
                return None
        return None

    def _in_header(self, last: int, tokens: Sequence[int]) -> bool:
        """Whether the token at ``last`` may end a turn's header (with ``header_ends``), by
        the tokens before it alone: a turn ended at most ``HEADER_SPAN`` tokens before it and
        no header has ended since."""
        if not self.header_ends:
            return False
        for i in range(last - 1, max(0, last - HEADER_SPAN) - 1, -1):
            if tokens[i] in self.marks:  # the last turn end: its header has no edge yet
                return i + 2 <= last and self._turn_edge(i, tokens[:last]) is None
        return False

    def _lead_end(self, tokens: Sequence[int], n: int) -> int:
        """Where lead edges stop among the first ``n`` positions: at the first turn end's
        token (a lead edge after it would only add decodes), else ``n``."""
        if self.marks:
            for i in range(min(n, len(tokens))):
                if tokens[i] in self.marks:
                    return i
        return n

    def chunk_end(
        self,
        start: int,
        n_prompt: int,
        image_starts: Sequence[int],
        room: int,
        tokens: Sequence[int] = (),
    ) -> int | None:
        """The end of the prompt chunk that starts at ``start``, or ``None`` when it does not
        fit in ``room`` tokens of this step (an aligned chunk is never cut by the budget)."""
        if room <= 0:
            return None
        later_images = [s for s in image_starts if s > start]
        if not self.aligned:
            return min([start + room, n_prompt, *later_images])
        last = n_prompt - 1 if self.splits_last(n_prompt, tokens) else n_prompt
        if start >= last:
            end = n_prompt  # the last token, alone
        else:
            end = min([self.next_chunk_end(start, last, tokens), *later_images])
        return end if end - start <= room else None

    def splits_last(self, n_prompt: int, tokens: Sequence[int] = ()) -> bool:
        """Whether a prompt of ``n_prompt`` positions reads its last token alone: when more
        than ``SHORT_TAIL`` tokens follow its last edge and that token cannot end a turn's
        header (a chat's prompt ends with the assistant's header: the question is read with
        it). Decided by the tokens before the last one, so a repeat of the prompt (which may
        keep all of them) decides alike."""
        return n_prompt - self.edge_at_or_below(
            n_prompt - 1, tokens
        ) > SHORT_TAIL and not self._in_header(n_prompt - 1, tokens)

    def exact_after(self, end: int, n_prompt: int, tokens: Sequence[int] = ()) -> int:
        """How many leading cells a longer prompt could keep once a prompt of ``n_prompt``
        positions is read up to ``end``: all of them, but for the last token's cell unless
        the prompt ends on an edge and was read to it in one chunk (a chat's prompt, after
        its assistant's header), where a longer prompt's chunk ends too."""
        if end < n_prompt:
            return end
        whole = self.aligned and not self.splits_last(n_prompt, tokens)
        return (
            n_prompt if whole and self.edge_at_or_below(n_prompt, tokens) == n_prompt else end - 1
        )

    def kept(
        self,
        n_shared: int,
        n_prompt: int,
        image_spans: Mapping[int, int],
        *,
        exact: int,
        cached_prompt: int,
        tokens: Sequence[int] = (),
    ) -> int:
        """How many leading cells a prompt of ``n_prompt`` positions keeps from cells that
        share ``n_shared`` tokens with it.

        ``exact`` is how many leading cells were made by reading a prompt in this layout, and
        ``cached_prompt`` that prompt's length. The last prompt token is always evaluated
        (sampling needs its logits), and an image is kept whole or not at all. ``tokens``: the
        prompt (where its turns end).
        """
        limit = min(n_shared, n_prompt - 1)
        if not (self.aligned and self.exact_keeps):
            return _outside_images(limit, image_spans)
        limit = min(limit, exact)
        repeat = cached_prompt == n_prompt and limit == n_prompt - 1
        if repeat and self.splits_last(n_prompt, tokens):
            return limit  # the same chunks up to the last token: every cell is the same
        kept = self.edge_at_or_below(limit, tokens)
        for start, n_pos in image_spans.items():
            for edge in (start, start + n_pos):
                if kept < edge <= limit:
                    kept = edge
        return _outside_images(kept, image_spans)

    def realign_span(self, cached: Sequence[int], exact: int) -> tuple[int, int] | None:
        """The positions of a finished sequence's cells to read again so that a longer prompt
        could keep them: from the last chunk start at or before ``exact`` (an edge, or the end
        of an image) to the last edge of ``cached``. ``None`` when that would
        make no more cells exact, or would cross an image not yet exact (its embeddings are
        gone; images are marked by negative keys), or when any cached cell may be kept."""
        if not (self.aligned and self.exact_keeps):
            return None
        end = self.edge_at_or_below(len(cached), cached)
        if end <= exact:
            return None
        start = self.edge_at_or_below(exact, cached)
        images = [i for i in range(start, end) if cached[i] < 0]
        if images and images[-1] >= exact:
            return None
        return (images[-1] + 1 if images else start), end

    def next_chunk_end(self, start: int, end: int, tokens: Sequence[int] = ()) -> int:
        """Where a chunk read from ``start`` ends, reading at most up to ``end`` (no prompt
        end or image before it)."""
        return min(self.next_edge(start, tokens), end) if self.aligned else end


def _outside_images(n: int, image_spans: Mapping[int, int]) -> int:
    """``n`` moved back to the start of an image it would cut through."""
    for start, n_pos in image_spans.items():
        if start < n < start + n_pos:
            return start
    return n
