"""The languages' rules written a second way, straight from the spec (DESIGN.md), for tests.

These read a token sequence through the tokenizer's *text* of each token (not through solm's
vocab objects or trackers), split it into spans (main text, blocks; steps) and apply the
rules to spans. Tests compare them with `structure()` on many generated sequences, so a bug
shared by the training side and the runtime (both use the tracker) still shows.
"""

from __future__ import annotations

import re

import torch
from hypothesis import strategies as st

from solm.core.control_tokens import ASYNC_CLOSE, ASYNC_OPEN, PROMISE_OPEN, SYNC, promise_close

IGNORE = -100
CLOSER = re.compile(r'^" tokens="(\d+)"/>$')
REGISTER = re.compile(r"^<reg_(\d+)>$")
PLAIN = [100, 101, 102, 103]  # ordinary tokens for generated sequences


def wellformed_pasta(tok):
    """Annotated-looking sequences: text, promises with blocks, syncs (random structure)."""
    a = dict(zip(("open", "async", "close", "sync"),
                 tok.convert_tokens_to_ids([PROMISE_OPEN, ASYNC_OPEN, ASYNC_CLOSE, SYNC])))
    closers = tok.convert_tokens_to_ids([promise_close(n) for n in (1, 2, 5)])
    text = st.lists(st.sampled_from(PLAIN), min_size=0, max_size=4)
    promise = st.tuples(st.sampled_from(closers), text, st.booleans()).map(
        lambda x: [a["open"], PLAIN[0], x[0], a["async"], *x[1], *([a["close"]] if x[2] else [])])
    piece = st.one_of(text, promise, promise, st.just([a["sync"]]))
    return st.lists(piece, min_size=1, max_size=8).map(
        lambda ps: [t for p in ps for t in p]).filter(bool)


def pasta_oracle(ids: list[int], tokenizer, layout: str = "pred10x"
                 ) -> tuple[torch.Tensor, list[int], list[int]]:
    """(visible [T, T], positions, targets) of a Pasta-Lang sequence in training order.

    Spec: `<promise topic="T" tokens="N"/>` in the main thread, directly followed by
    `<async>`, opens a block that runs to its first `</async>` (or the end); anything else is
    main text, and inside a block every token is ordinary. Positions, Pred-10X: a block
    starts at the position after its promise; main continues at promise position + 1 + 10 N
    (every closer in main moves main by 10 N, with or without a block). Overlap: every
    token's position is 1 + the largest position among the other tokens it sees (0 for one
    that sees none). A block sees main up to its promise, itself,
    and blocks joined by a `<sync/>` before its promise; main sees a block from the first main
    `<sync/>` after its promise on. Each token predicts the next token of its own thread;
    every `</async>` (a stray one in main too) and the last token of a thread predict
    nothing.
    """
    text = tokenizer.convert_ids_to_tokens([int(t) for t in ids])
    n = len(ids)
    block_of = [-1] * n  # -1: main, else block number
    promise_at: list[int] = []  # block b's promise (closer index)
    i = 0
    while i < n:
        m = CLOSER.match(text[i])
        if m and i + 1 < n and text[i + 1] == "<async>":
            b = len(promise_at)
            promise_at.append(i)
            j = i + 1
            while j < n:
                block_of[j] = b
                if j > i + 1 and text[j] == "</async>":
                    break
                j += 1
            i = j + 1
        else:
            i += 1

    positions = [0] * n
    pos = 0
    for i in range(n):
        if block_of[i] == -1:
            positions[i] = pos
            m = CLOSER.match(text[i])
            pos += 1 + (10 * int(m.group(1)) if m else 0)
    for b, p in enumerate(promise_at):
        members = [i for i in range(n) if block_of[i] == b]
        for k, i in enumerate(members):
            positions[i] = positions[p] + 1 + k

    syncs = [i for i in range(n) if block_of[i] == -1 and text[i] == "<sync/>"]

    def joined(b: int, after: int, before: int) -> bool:
        """A main `<sync/>` s with promise(b) < s and after < s <= before."""
        return any(promise_at[b] < s and after < s <= before for s in syncs)

    visible = torch.zeros(n, n, dtype=torch.bool)
    for q in range(n):
        bq = block_of[q]
        for k in range(n):
            bk = block_of[k]
            if bq == -1:
                ok = k <= q if bk == -1 else joined(bk, -1, q)
            elif bk == -1:
                ok = k <= promise_at[bq]
            elif bk == bq:
                ok = k <= q
            else:
                ok = joined(bk, -1, promise_at[bq] - 1)
            visible[q, k] = ok

    if layout == "overlap":
        for q in range(n):  # every key a token sees comes before it in training order
            seen = [positions[k] for k in range(q) if visible[q, k]]
            positions[q] = 1 + max(seen) if seen else 0

    targets = [IGNORE] * n
    for thread in set(block_of):
        members = [i for i in range(n) if block_of[i] == thread]
        for a, b in zip(members, members[1:]):
            if text[a] != "</async>":
                targets[a] = int(ids[b])
    return visible, positions, targets


def tip_oracle(ids: list[int], tokenizer, prompt_len: int) -> tuple[torch.Tensor, list[int],
                                                                     list[int]]:
    """(visible, positions, targets) of prompt + TIP response.

    Spec: every `<reg_i>` in the response opens a step holding register i; the step that held
    register i before dies at that token, for it and every later token, unless that step is
    the one the new `<reg_i>` directly follows: then it dies at the token after. Tokens
    before the first register, and the prompt, never die. Positions are plain indices; each
    token predicts the next one.
    """
    text = tokenizer.convert_ids_to_tokens([int(t) for t in ids])
    n = len(ids)
    death = [n + 1] * n
    holder_tokens: dict[int, list[int]] = {}  # register -> token indices of its live step
    current: list[int] = []
    for i in range(prompt_len, n):
        m = REGISTER.match(text[i])
        if m:
            reg = int(m.group(1))
            old = holder_tokens.get(reg, [])
            directly_before = bool(old) and old[-1] == i - 1
            for t in old:
                death[t] = i + 1 if directly_before else i
            current = []
            holder_tokens[reg] = current
        current.append(i)
    visible = torch.zeros(n, n, dtype=torch.bool)
    for q in range(n):
        for k in range(q + 1):
            visible[q, k] = death[k] > q
    targets = [int(t) for t in ids[1:]] + [IGNORE] if n else []
    return visible, list(range(n)), targets


def pdiff_oracle(ids: list[int], tokenizer, layout: str = "pred10x", block_size: int = 0
                 ) -> tuple[torch.Tensor, list[int], list[int], list[bool]]:
    """(visible, positions, autoregressive targets, diffusable) of a Planned Diffusion
    sequence, from the spec's rules: PASTA's spans and positions; inside a block every
    token sees every token of the same block (bidirectional), or with `block_size` B > 0
    every token of its own B-slot piece and the pieces before it (`<async>` goes with the
    first piece, `</async>` with the piece of the token before it); only main-thread tokens
    have autoregressive targets (the next main token; a stray `</async>` none); a block's
    tokens other than `<async>`/`</async>` are the diffused ones."""
    visible, positions, targets = pasta_oracle(ids, tokenizer, layout)
    text = tokenizer.convert_ids_to_tokens([int(t) for t in ids])
    n = len(ids)
    # block membership a second time: a closer + <async> starts it, the first later
    # </async> (or the end) ends it
    block_of = [-1] * n
    b, i = 0, 0
    while i < n:
        if CLOSER.match(text[i]) and i + 1 < n and text[i + 1] == "<async>":
            j = i + 1
            while j < n:
                block_of[j] = b
                if j > i + 1 and text[j] == "</async>":
                    break
                j += 1
            b, i = b + 1, j + 1
        else:
            i += 1
    piece = [0] * n  # with block_size: the B-slot piece of a block's token, counted out
    for b in set(block_of) - {-1}:
        members = [i for i in range(n) if block_of[i] == b]
        for m, i in enumerate(members):
            if block_size and 0 < m:
                closing = text[i] == "</async>" and m == len(members) - 1 and m > 1
                piece[i] = piece[members[m - 1]] if closing else (m - 1) // block_size
    for q in range(n):
        for k in range(n):
            if block_of[q] != -1 and block_of[q] == block_of[k] and piece[k] <= piece[q]:
                visible[q, k] = True
    targets = [t if block_of[i] == -1 else IGNORE for i, t in enumerate(targets)]
    diffusable = [block_of[i] != -1 and text[i] not in ("<async>", "</async>")
                  for i in range(n)]
    return visible, positions, targets, diffusable
