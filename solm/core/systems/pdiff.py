"""Planned Diffusion's structure: who attends to whom, at which position, predicting what.

One model plans in Pasta-Lang autoregressively, fills every planned chunk at once by masked
discrete diffusion, then continues autoregressively. The promises before a `<sync/>` are the
chunks. This module is the single source of truth for the layout, the masks, the positions
and both kinds of targets; `pdiff sft` and the sampler (`solm.decode.pdiff`) read them here.

Layout (what a training sequence looks like; `to_slots` writes it from Pasta-Lang tokens):
- **Slots.** The chunk of a promise `tokens="N"` occupies exactly `10 x N` slots: `<async>`,
  the content, pad tokens up to the slot count, `</async>`. The k-th pad after the content is
  the pad cycle's token k mod its length (`PdiffVocab.pad_for`; `PAD_CYCLE` distinct tokens
  in a model trained with the cycle, one in a model trained before it). In the data N is rounded up so
  the content fits with at least one pad, and a random 0-10 extra pads (as the published
  method draws) go *inside* the slot count: N grows to hold them, never past it. The rule
  annotator writes N as the content length rounded up to a ten (`rules.tens_for`).
- **Positions.** PASTA's two layouts (`PdiffVocab.positions`). Pred-10X: the chunk starts
  right after its promise and the main thread continues at promise position + 1 + slots.
  At decode `--length-scale s` makes a chunk `round(10 x N x s)` slots (at least 3), and
  positions follow the same spans (`PdiffTracker(length_scale=s)`). Overlap: the chunk
  starts right after its promise, the main thread continues right after its own last token,
  and the `<sync/>` after the chunks at 1 + the largest slot position it sees.
- **Tokens.** `<async>` and `</async>` stay in the sequence at the chunk's first and last
  slot; they are never masked (the layout fixes them). Pad tokens are control tokens of
  their own, `<|pdiff_pad|>`, `<|pdiff_pad_1|>`... (the embedded model's EOS also serves as
  the tokenizer's pad, so it cannot mark a chunk's unused slots); the mask token is
  `MASK_TOKEN` = `<|mdm_mask|>`. Any pad ends a chunk's content; pads are trimmed from
  decoded answers.
- **Inside chunks** no control token and no EOS may be sampled, except pad
  (`PdiffVocab.chunk_banned_ids`).

Visibility: PASTA's three terms plus one, "bidirectional inside a chunk's block, causal
across its blocks": `pdiff_visible = or_masks(pasta_visible, chunk_blocks)`. So plan and
main-thread tokens are causal; a chunk token sees the main thread up to its promise, chunks
joined by an earlier `<sync/>`, and every slot of its own chunk in its own block or an
earlier one (not its siblings); later main tokens see a chunk only from the `<sync/>` that
joins it.

Blocks (BD3-LM's, inside each chunk): a model trained with `block_size` B > 0 denoises a
chunk B slots at a time, left to right, each block seeing the chunk's finished blocks. The
slot of order o (0 is `<async>`) is in block `slot_block(o, B)` = max(o - 1, 0) // B, so
`<async>` opens block 0, and `</async>` joins the block of the slot before it (no block
holds it alone); the attribute `block` carries it,
so every engine reads the rule from the attributes alone. B = 0 (and a model trained before
blocks) puts every slot in block 0: the whole chunk at once. The first slot of block b > 0
is predicted (the shifted convention below) by the last slot of block b - 1, which cannot
see block b: that one token of each block is predicted from the finished blocks alone, in
training as in sampling.

Two copies (BD3-LM's layout, `two_copy`): the sequence as above, every chunk slot clean,
then a *noised copy* of every chunk's slots (attribute `copy` 1, the same attributes and
positions as the clean slot it copies, `source` naming it). Visibility (`two_copy_visible`):
clean tokens see clean tokens exactly as `pdiff_visible` says (a clean slot sees its chunk's
blocks up to its own: block-causal), and never a noised one; a noised slot sees its own
block of the noised copy both ways, the clean blocks of its chunk strictly before its own,
and, outside its chunk, what its clean slot sees. So every block of every chunk is a
denoising problem in one forward pass, each seeing what the sampler shows when it denoises
that block: the finished blocks (clean) and its own slots (partly masked). Main tokens after
`<sync/>` read the clean chunks, as they read the finished chunks at decode. The predictor
of a noised slot (`two_copy_predictors`) is the noised slot before it in the same block, and
for a block's first slot the clean slot before it (the finished block's last slot, the row
the sampler reads it from).

Targets:
- main-thread tokens: the next main-thread token (the autoregressive loss), exactly PASTA's
  rule (a promise predicts the first main token after its chunk);
- chunk tokens predict nothing autoregressively. A *masked* chunk token j (one of the
  `diffusable` slots between `<async>` and `</async>`) is predicted from the logits at
  `predictor(j) = j - 1`: the shifted convention of diffusion models initialised from an
  autoregressive one (the row that predicted token j before training keeps doing so).
  Training and sampling both call `predictor`. In a chunk laid out by `to_slots`, j - 1 is
  always a slot of the same chunk (`<async>` for the first content slot).

Malformed sequences never raise. They are read as PASTA reads them (see
`solm.core.systems.pasta`): tags out of place are main-thread text, a block left unclosed
runs to the end and is never joined; a block whose length differs from its promise's slots
keeps its tokens (its positions then overlap the main thread's, or leave a gap). Only
`<async>`/`</async>` tokens inside a block are not diffusable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from solm.core.chat import eos_ids
from solm.core.control_tokens import (MASK_TOKEN, MAX_PROMISE_TENS, PAD_CYCLE, PAD_TOKEN,
                                      pad_cycle_tokens)
from solm.core.structure import IGNORE, Attrs, Structure, or_masks
from solm.core.systems.pasta import ATTR_NAMES as PASTA_ATTR_NAMES
from solm.core.systems.pasta import (MAIN, PastaTracker, PastaVocab, TokenAttrs,
                                     attrs_to_tensors, pasta_visible, walk_with_predictors)

NAME = "pdiff"
EXTRA_PADS_MAX = 10  # the published method adds 0-10 random pads to each chunk
MIN_SLOTS = 3  # `<async>`, one content slot, `</async>`
# what visibility reads: PASTA's attributes and a chunk slot's block
ATTR_NAMES = (*PASTA_ATTR_NAMES, "block")
__all__ = ["ATTR_NAMES", "NAME", "PdiffVocab", "Vocab", "PdiffTracker", "chunk_slots",
           "slot_block", "chunk_blocks", "pdiff_visible", "predictor", "to_slots", "structure",
           "two_copy", "two_copy_visible", "two_copy_predictors", "LAYOUTS"]
LAYOUTS = ("one-copy", "two-copy")  # the training layouts (`pdiff sft --layout`)


@dataclass(frozen=True)
class PdiffVocab(PastaVocab):
    """Pasta-Lang's ids plus the mask token and the pad cycle (`pad` is its first token)."""

    mask: int = -1
    pad: int = -1
    pad_cycle: tuple[int, ...] = ()
    block_size: int = 0  # slots a chunk denoises at a time (0: the whole chunk)

    @classmethod
    def from_tokenizer(cls, tokenizer, positions: str = "pred10x",
                       pad_cycle: int | None = None, block_size: int = 0) -> "PdiffVocab":
        """`pad_cycle`: the pads the model trains with (None: as many as the tokenizer has);
        `block_size`: the chunk blocks it was trained with (0: whole chunks)."""
        if block_size < 0:
            raise ValueError(f"block_size must be >= 0, got {block_size}")
        vocab = tokenizer.get_vocab()
        missing = [t for t in (MASK_TOKEN, PAD_TOKEN) if t not in vocab]
        if missing:
            raise ValueError(f"tokenizer lacks Planned Diffusion tokens {missing}; call "
                             f"add_control_tokens(model, tokenizer, 'pdiff') first")
        base = PastaVocab.from_tokenizer(tokenizer, positions)
        cycle = []
        for token in pad_cycle_tokens(pad_cycle or PAD_CYCLE):  # the model's pads, in order
            if token not in vocab:
                if pad_cycle:
                    raise ValueError(f"tokenizer lacks pad token {token} of a {pad_cycle}-pad "
                                     f"cycle; call add_control_tokens(..., 'pdiff', "
                                     f"pad_cycle={pad_cycle}) first")
                break
            cycle.append(vocab[token])
        return cls(base.promise_open, base.async_open, base.async_close, base.sync,
                   base.close_tens, eos_ids(tokenizer), positions, vocab[MASK_TOKEN],
                   vocab[PAD_TOKEN], tuple(cycle), block_size)

    @property
    def pads(self) -> tuple[int, ...]:
        """Every pad token (the cycle; a vocab built by hand may give only `pad`)."""
        return self.pad_cycle or (self.pad,)

    def pad_for(self, k: int) -> int:
        """The pad of the k-th slot after a chunk's content."""
        return self.pads[k % len(self.pads)]

    @property
    def control_ids(self) -> list[int]:
        return [*super().control_ids, self.mask, *self.pads]

    @property
    def chunk_banned_ids(self) -> list[int]:
        """What may never be sampled inside a chunk: every control token and EOS, but pads."""
        pads = set(self.pads)
        return [t for t in (*self.control_ids, *self.eos) if t not in pads]

    def close_for(self, tens: int) -> int:
        return next(t for t, n in self.close_tens.items() if n == tens)


Vocab = PdiffVocab


def slot_block(order: int, block_size: int) -> int:
    """The block of a chunk's slot of `order` (0 is `<async>`): content slots 1..B are block
    0 (with `<async>`), B+1..2B block 1, ...; every slot is block 0 when `block_size` is 0."""
    return max(order - 1, 0) // block_size if block_size > 0 else 0


def chunk_slots(tens: int, length_scale: float = 1.0) -> int:
    """Slots of a chunk promised at `tokens="tens"`: 10 x N, times the decode's length scale."""
    return max(MIN_SLOTS, int(round(10 * tens * length_scale)))


class PdiffTracker(PastaTracker):
    """PASTA's tracker with Planned Diffusion's spans (`chunk_slots`, length scale)."""

    def __init__(self, vocab: PdiffVocab, length_scale: float = 1.0):
        super().__init__(vocab)
        self.length_scale = length_scale

    def block_span(self, tens: int) -> int:
        return chunk_slots(tens, self.length_scale)

    def fork(self, fid: int, tok: int) -> TokenAttrs:
        attrs = super().fork(fid, tok)
        # `</async>` joins the block of the slot before it (no block holds it alone)
        closing = tok == self.vocab.async_close and attrs.order > 0
        attrs.block = slot_block(attrs.order - closing, self.vocab.block_size)
        return attrs

    def chunk_attrs(self, fid: int, tokens: Sequence[int]) -> list[TokenAttrs]:
        """Attributes of every slot of chunk `fid` (they do not depend on what the slots
        hold, so the sampler computes them once when it lays the chunk out)."""
        return [self.fork(fid, t) for t in tokens]


def chunk_blocks(q: Attrs, k: Attrs) -> torch.Tensor:
    """A chunk's slot sees every slot of the same chunk in its block or an earlier one
    (bidirectional inside a block; with one block, the whole chunk)."""
    return (k["thread"] > MAIN) & (k["thread"] == q["thread"]) & (k["block"] <= q["block"])


pdiff_visible = or_masks(pasta_visible, chunk_blocks)


def predictor(j: int) -> int:
    """The index (in training order, or slot within a chunk) of the logits row that predicts
    masked token j: the shifted convention, the same in training and in sampling."""
    return j - 1


def to_slots(token_ids: Sequence[int], vocab: PdiffVocab,
             extra_pads: Callable[[], int] = lambda: 0) -> list[int]:
    """Pasta-Lang tokens -> Planned Diffusion's layout: each `promise, <async> content
    </async>` becomes `promise', <async> content pad... </async>` with exactly 10 x N' slots,
    N' the smallest N' >= N that holds the content, one pad and `extra_pads()` more; the
    pads run through the vocab's pad cycle from its first token.
    Raises ValueError when a chunk would need more than the largest promise."""
    ids = [int(t) for t in token_ids]
    out: list[int] = []
    i = 0
    while i < len(ids):
        tok = ids[i]
        opens = (tok in vocab.close_tens and i + 1 < len(ids)
                 and ids[i + 1] == vocab.async_open)
        end = ids.index(vocab.async_close, i + 2) if opens and vocab.async_close in ids[i + 2:] \
            else -1
        if end < 0:
            out.append(tok)
            i += 1
            continue
        content = ids[i + 2:end]
        extra = int(extra_pads())
        if not 0 <= extra <= EXTRA_PADS_MAX:
            raise ValueError(f"extra pads must be 0..{EXTRA_PADS_MAX}, got {extra}")
        need = len(content) + 2 + 1 + extra
        tens = max(vocab.close_tens[tok], math.ceil(need / 10))
        if tens > MAX_PROMISE_TENS:
            raise ValueError(f"a chunk of {len(content)} tokens needs tokens=\"{tens}\" "
                             f"(largest: {MAX_PROMISE_TENS})")
        pads = 10 * tens - 2 - len(content)
        out += [vocab.close_for(tens), vocab.async_open, *content,
                *[vocab.pad_for(k) for k in range(pads)], vocab.async_close]
        i = end + 1
    return out


def diffusable(token_ids: Sequence[int], attrs: Sequence[TokenAttrs], vocab: PdiffVocab
               ) -> list[bool]:
    """Chunk slots the diffusion masks and predicts: block tokens but the block tags."""
    return [a.thread != MAIN and int(t) not in (vocab.async_open, vocab.async_close)
            for t, a in zip(token_ids, attrs)]


def structure(token_ids: Sequence[int] | torch.Tensor, vocab: PdiffVocab, prompt_len: int = 0,
              length_scale: float = 1.0) -> Structure:
    """Mask, positions and autoregressive targets of a sequence in this layout; `attrs`
    carries `diffusable` (1 on the chunk slots the diffusion loss masks and predicts).

    `prompt_len` is accepted so every system's `structure` has one signature: the prompt is
    main-thread text under the same rules."""
    if isinstance(token_ids, torch.Tensor):
        token_ids = token_ids.tolist()
    attrs, targets, _ = walk_with_predictors(token_ids, vocab, PdiffTracker(vocab, length_scale))
    targets = [t if a.thread == MAIN else IGNORE for a, t in zip(attrs, targets)]
    t = attrs_to_tensors(attrs)
    t["block"] = torch.tensor([a.block for a in attrs], dtype=torch.long)
    t["diffusable"] = torch.tensor(diffusable(token_ids, attrs, vocab), dtype=torch.long)
    return Structure(term=pdiff_visible, position_ids=t["pos"],
                     targets=torch.tensor(targets, dtype=torch.long), attrs=t)


def two_copy_visible(q: Attrs, k: Attrs) -> torch.Tensor:
    """The two-copy layout's rule (module docstring): clean among clean by `pdiff_visible`;
    a noised slot reads its own noised block, its chunk's earlier clean blocks, and the
    context its clean slot reads."""
    q_clean, k_clean = q["copy"] == 0, k["copy"] == 0
    same_chunk = (k["thread"] == q["thread"]) & (q["thread"] > MAIN)
    clean = q_clean & k_clean & pdiff_visible(q, k)
    own_block = ~q_clean & ~k_clean & same_chunk & (k["block"] == q["block"])
    reads_clean = ~q_clean & k_clean & torch.where(same_chunk, k["block"] < q["block"],
                                                   pasta_visible(q, k))
    return clean | own_block | reads_clean


def two_copy(token_ids: Sequence[int] | torch.Tensor, vocab: PdiffVocab, prompt_len: int = 0,
             length_scale: float = 1.0) -> Structure:
    """`structure` with a noised copy of every chunk slot appended (module docstring): T + M
    rows for M chunk slots; attrs gain `copy` (0 clean, 1 noised) and `source` (the clean
    row each row copies; its own index for a clean row); `diffusable` marks the noised
    copies of diffusable slots (the clean copy's are 0: they are never masked)."""
    if isinstance(token_ids, torch.Tensor):
        token_ids = token_ids.tolist()
    s = structure(token_ids, vocab, prompt_len, length_scale)
    n = len(token_ids)
    chunk = torch.nonzero(s.attrs["thread"] > MAIN).flatten()
    source = torch.cat([torch.arange(n), chunk])
    attrs = {name: t[source] for name, t in s.attrs.items()}
    attrs["copy"] = torch.cat([torch.zeros(n, dtype=torch.long),
                               torch.ones(len(chunk), dtype=torch.long)])
    attrs["source"] = source
    attrs["diffusable"] = torch.cat([torch.zeros(n, dtype=torch.long),
                                     s.attrs["diffusable"][chunk]])
    targets = torch.cat([s.targets, torch.full((len(chunk),), IGNORE, dtype=torch.long)])
    return Structure(term=two_copy_visible, position_ids=s.position_ids[source],
                     targets=targets, attrs=attrs)


def two_copy_predictors(s: Structure) -> torch.Tensor:
    """Per row of a `two_copy` structure, the row that predicts it when it is a masked noised
    slot (-1 for other rows): the noised row before it in the same block of its chunk, or,
    for the first slot of a block, the clean row before its source."""
    n = len(s.attrs["copy"])
    out = torch.full((n,), -1, dtype=torch.long)
    noised = torch.nonzero(s.attrs["copy"] == 1).flatten()
    if not len(noised):
        return out
    prev = noised - 1
    same_block = ((s.attrs["copy"][prev] == 1) & (s.attrs["thread"][prev] == s.attrs["thread"][noised])
                  & (s.attrs["block"][prev] == s.attrs["block"][noised]))
    out[noised] = torch.where(same_block, prev, s.attrs["source"][noised] - 1)
    return out
