"""PASTA's structure: who may attend to whom, at which position, predicting what.

The single source of truth for PASTA's masks, positions and targets. Every token gets a small
record of attributes (`TokenAttrs`) from a tracker that sees each thread's tokens in that
thread's order; visibility is three named mask terms over two tokens' attributes, composed
with `or_masks` (`pasta_visible`). Training walks the finished sequence in training order;
the runtime feeds the same tracker in decode order, one step at a time. Attributes do not
depend on how threads interleave, so both build the same mask rows.

Pasta-Lang rules implemented here (see DESIGN.md):
- an async block sees the main thread up to and including its promise, and itself;
- main-thread tokens do not see an async block until a `<sync/>` after its promise;
- an async block sees blocks that were joined (synced) before its promise;
- positions, in one of two layouts a model is trained with (`PastaVocab.positions`):
  - "pred10x" (the paper's): the block starts right after its promise; the main thread
    continues at promise position + 1 + 10·N;
  - "overlap": the block starts right after its promise; the main thread continues right
    after its own last token (blocks overlap its positions instead of reserving room); a
    `<sync/>` and what follows it continue at 1 + the largest position they see. Every
    token's position is then 1 + the largest position among the keys it sees, so a thread
    always continues where what it sees ends: what an engine whose sequences must continue at
    their largest position + 1 (llama.cpp) can express, with no predicted length;
- targets: the next token of the same thread; the promise's closing token therefore
  predicts the first main-thread token after its block; `</async>` predicts nothing.

Malformed sequences never raise; they are read as follows (and tested):
- `<async>` not directly after a promise's closing token, `</async>` outside a block, and
  a promise's tokens without a following block are ordinary main-thread tokens (a promise
  closing token still moves the main thread's positions by 10·N); a stray `</async>`, like
  every `</async>`, predicts nothing;
- inside a block, promise / sync / `<async>` tokens are ordinary block tokens (no nesting);
- `<sync/>` with nothing open just advances the epoch (harmless);
- a block left unclosed runs to the end of the sequence and is never joined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from solm.core.chat import eos_ids
from solm.core.control_tokens import (ASYNC_CLOSE, ASYNC_OPEN, MAX_PROMISE_TENS, PROMISE_OPEN,
                                      SYNC, promise_close)
from solm.core.structure import IGNORE, Attrs, Structure, or_masks

NAME = "pasta"
MAIN = 0
POSITIONS = ("pred10x", "overlap")  # the position layouts (module docstring)
POSITIONS_HELP = ("Position layout of the threads: pred10x (the paper's: the main thread "
                  "resumes 10N positions past a promise) or overlap (blocks overlap the main "
                  "thread's positions, which llama.cpp can decode). Recorded in solm.json; "
                  "decoding reads it from there.")
ATTR_NAMES = ("thread", "order", "anchor", "epoch", "join")  # what visibility reads


@dataclass(frozen=True)
class PastaVocab:
    """Token ids of Pasta-Lang's control tokens in one tokenizer."""

    promise_open: int
    async_open: int
    async_close: int
    sync: int
    close_tens: dict[int, int]  # closing-token id -> N
    eos: tuple[int, ...] = ()
    positions: str = "pred10x"  # the position layout a model was trained with

    @classmethod
    def from_tokenizer(cls, tokenizer, positions: str = "pred10x") -> "PastaVocab":
        check_positions(positions)
        vocab = tokenizer.get_vocab()
        missing = [t for t in (PROMISE_OPEN, ASYNC_OPEN, ASYNC_CLOSE, SYNC) if t not in vocab]
        if missing:
            raise ValueError(f"tokenizer lacks Pasta-Lang tokens {missing}; "
                             f"call add_control_tokens(model, tokenizer, 'pasta') first")
        close = {vocab[promise_close(n)]: n for n in range(1, MAX_PROMISE_TENS + 1)}
        return cls(vocab[PROMISE_OPEN], vocab[ASYNC_OPEN], vocab[ASYNC_CLOSE], vocab[SYNC],
                   close, eos_ids(tokenizer), positions)

    @property
    def control_ids(self) -> list[int]:
        return [self.promise_open, self.async_open, self.async_close, self.sync,
                *self.close_tens]


Vocab = PastaVocab  # the name every structure module exports


def check_positions(positions: str) -> str:
    if positions not in POSITIONS:
        raise ValueError(f"positions must be one of {', '.join(POSITIONS)}, got {positions!r}")
    return positions


@dataclass
class TokenAttrs:
    """Per-token attributes; visibility and positions are functions of these alone."""

    thread: int  # 0 main, i >= 1 the i-th async block
    order: int  # index within its thread
    anchor: int  # main: own order; block: main order of its promise's closing token
    epoch: int  # main: syncs completed (a sync counts itself); block: epoch at its promise
    join: int  # block: the epoch at which main sees it; main: 0
    pos: int  # position id
    is_tag: bool = False  # part of a control tag (not response content)
    block: int = 0  # Planned Diffusion: the denoising block of a chunk slot (0 elsewhere)


@dataclass
class _Fork:
    anchor: int
    epoch: int
    next_pos: int
    order: int = 0


class PastaTracker:
    """Assigns TokenAttrs to tokens as each thread emits them (any interleaving)."""

    def __init__(self, vocab: PastaVocab):
        self.vocab = vocab
        self.main_order = 0
        self.main_pos = 0
        self.epoch = 0
        self.forks: dict[int, _Fork] = {}
        self._in_topic = False
        self._last_close: tuple[int, int, int] | None = None  # (order, pos, epoch)
        self.last_main_was_close = False

    def block_span(self, tens: int) -> int:
        """Positions a promise of `tokens="tens"` reserves for its block (Pred-10X)."""
        return 10 * tens

    @property
    def overlap(self) -> bool:
        return self.vocab.positions == "overlap"

    def main(self, tok: int) -> TokenAttrs:
        v = self.vocab
        is_sync = tok == v.sync
        if is_sync:
            self.epoch += 1
            if self.overlap:  # main now sees the blocks this sync joins: continue past them
                joined = [f.next_pos for f in self.forks.values() if f.epoch + 1 == self.epoch]
                self.main_pos = max([self.main_pos, *joined])
        is_close = tok in v.close_tens
        is_tag = self._in_topic or is_close or tok in (v.promise_open, v.sync)
        attrs = TokenAttrs(MAIN, self.main_order, self.main_order, self.epoch, 0, self.main_pos,
                           is_tag)
        if is_close:
            self._last_close = (self.main_order, self.main_pos, self.epoch)
            self.main_pos += 1 + (0 if self.overlap else self.block_span(v.close_tens[tok]))
            self._in_topic = False
        else:
            self.main_pos += 1
            if tok == v.promise_open:
                self._in_topic = True
        self.last_main_was_close = is_close
        self.main_order += 1
        return attrs

    def open_fork(self) -> int:
        """Start the block of the promise whose closing token main fed last; returns its id."""
        if self._last_close is None:
            raise RuntimeError("open_fork() without a promise")
        order, pos, epoch = self._last_close
        fid = len(self.forks) + 1
        self.forks[fid] = _Fork(anchor=order, epoch=epoch, next_pos=pos + 1)
        self._last_close = None
        self.last_main_was_close = False
        return fid

    def fork(self, fid: int, tok: int) -> TokenAttrs:
        f = self.forks[fid]
        is_tag = tok in (self.vocab.async_open, self.vocab.async_close)
        attrs = TokenAttrs(fid, f.order, f.anchor, f.epoch, f.epoch + 1, f.next_pos, is_tag)
        f.order += 1
        f.next_pos += 1
        return attrs


# ---- visibility: three terms over query (q) and key (k) attributes ------------------------

def main_up_to_promise(q: Attrs, k: Attrs) -> torch.Tensor:
    """Main-thread keys up to the query's anchor: main tokens see main's past; a block sees
    main up to and including its promise."""
    return (k["thread"] == MAIN) & (k["order"] <= q["anchor"])


def own_block(q: Attrs, k: Attrs) -> torch.Tensor:
    """A block's earlier tokens (and itself) are visible to that block."""
    return (k["thread"] > MAIN) & (k["thread"] == q["thread"]) & (k["order"] <= q["order"])


def joined_after_sync(q: Attrs, k: Attrs) -> torch.Tensor:
    """A block's tokens are visible to every token whose epoch reached the block's join
    epoch: main after the `<sync/>` that joined it, blocks promised after that sync."""
    return (k["thread"] > MAIN) & (k["join"] <= q["epoch"])


pasta_visible = or_masks(main_up_to_promise, own_block, joined_after_sync)


def attrs_to_tensors(attrs: Sequence[TokenAttrs], device=None) -> dict[str, torch.Tensor]:
    names = (*ATTR_NAMES, "pos", "is_tag")
    return {n: torch.tensor([int(getattr(a, n)) for a in attrs], dtype=torch.long, device=device)
            for n in names}


def walk_training_order(token_ids: Sequence[int], vocab: PastaVocab
                        ) -> tuple[list[TokenAttrs], list[int]]:
    """Attributes of each token of a training-order sequence, and the thread streams' next
    tokens (targets)."""
    attrs, targets, _ = walk_with_predictors(token_ids, vocab)
    return attrs, targets


def content_ids(token_ids: Sequence[int], vocab: PastaVocab) -> list[int]:
    """The tokens of a Pasta-Lang answer that are not part of a control tag: the content a
    reader gets, in the order `walk_training_order` lays it."""
    attrs, _ = walk_training_order(token_ids, vocab)
    return [t for t, a in zip(token_ids, attrs) if not a.is_tag]


def walk_with_predictors(token_ids: Sequence[int], vocab: PastaVocab,
                         tracker: PastaTracker | None = None
                         ) -> tuple[list[TokenAttrs], list[int], list[int]]:
    """`walk_training_order`, and for each token the index of the token whose target it is
    (-1: none, as for a thread's first token). `tracker`: a fresh tracker of a system that
    reads Pasta-Lang with other spans (Planned Diffusion)."""
    tracker = tracker if tracker is not None else PastaTracker(vocab)
    attrs: list[TokenAttrs] = []
    current: int | None = None
    for tok in token_ids:
        tok = int(tok)
        if current is None:
            if tok == vocab.async_open and tracker.last_main_was_close:
                current = tracker.open_fork()
                attrs.append(tracker.fork(current, tok))
            else:
                attrs.append(tracker.main(tok))
        else:
            attrs.append(tracker.fork(current, tok))
            if tok == vocab.async_close:
                current = None
    targets = [IGNORE] * len(attrs)
    predictor = [-1] * len(attrs)
    last_of_thread: dict[int, int] = {}
    for idx, a in enumerate(attrs):
        prev = last_of_thread.get(a.thread)
        if prev is not None and int(token_ids[prev]) != vocab.async_close:
            targets[prev] = int(token_ids[idx])
            predictor[idx] = prev
        last_of_thread[a.thread] = idx
    return attrs, targets, predictor


def structure(token_ids: Sequence[int] | torch.Tensor, vocab: PastaVocab,
              prompt_len: int = 0) -> Structure:
    """Mask, positions and targets of a Pasta-Lang token sequence (prompt + response).

    The prompt is main-thread text under the same rules (`prompt_len` is accepted so every
    system's `structure` has one signature; PASTA's rules do not depend on it)."""
    if isinstance(token_ids, torch.Tensor):
        token_ids = token_ids.tolist()
    attrs, targets = walk_training_order(token_ids, vocab)
    t = attrs_to_tensors(attrs)
    return Structure(term=pasta_visible, position_ids=t["pos"],
                     targets=torch.tensor(targets, dtype=torch.long), attrs=t)
