"""Pasta-Lang grammar as logit masks: which tokens a thread may emit in its current state."""

from __future__ import annotations

import torch

from solm.core.systems.pasta import PastaVocab


class PastaGrammar:
    """Precomputed bool masks over the vocabulary (True = banned)."""

    def __init__(self, vocab: PastaVocab, tokenizer, vocab_size: int):
        self.vocab = vocab
        n = vocab_size
        close = torch.zeros(n, dtype=torch.bool)
        close[list(vocab.close_tens)] = True
        control = torch.zeros(n, dtype=torch.bool)
        control[vocab.control_ids] = True
        bad_topic = _unsafe_in_attribute(tokenizer, n)
        bad_topic |= control
        bad_topic[list(vocab.close_tens)] = False
        for e in vocab.eos:
            if e < n:
                bad_topic[e] = True

        def ban(*ids: int) -> torch.Tensor:
            m = torch.zeros(n, dtype=torch.bool)
            m[list(ids)] = True
            return m

        self.sequential = control
        # main thread, outside a tag: anything but block tokens and promise closers
        self.main = ban(vocab.async_open, vocab.async_close) | close
        self.main_no_sync = self.main | ban(vocab.sync)
        # and once a group holds as many promises as allowed, no further promise
        self.main_full = self.main | ban(vocab.promise_open)
        # inside a topic: plain text without quotes/newlines, or a closer
        self.topic = bad_topic
        self.topic_must_close = ~close
        # a block: no promises, no sync, no nested blocks
        self.fork = close | ban(vocab.promise_open, vocab.async_open, vocab.sync)
        # and, where EOS is masked in blocks, no EOS: a block ends with its `</async>`
        self.fork_no_eos = self.fork | ban(*[e for e in vocab.eos if e < n])

    def for_main(self, promises_since_sync: int, max_promises: int) -> torch.Tensor:
        """The main thread outside a topic: `<sync/>` only once a promise is open, a new
        promise only while the group holds fewer than `max_promises`."""
        if not promises_since_sync:
            return self.main_no_sync
        return self.main_full if promises_since_sync >= max_promises else self.main


def _unsafe_in_attribute(tokenizer, n: int) -> torch.Tensor:
    """Tokens that would break a topic attribute (quotes, newlines, angle brackets).

    Computed once per grammar; the runtime keeps its grammar for its lifetime."""
    mask = torch.ones(n, dtype=torch.bool)
    pieces = tokenizer.batch_decode([[i] for i in range(min(n, len(tokenizer)))])
    for i, piece in enumerate(pieces):
        mask[i] = any(c in piece for c in '"\n<>')
    return mask
