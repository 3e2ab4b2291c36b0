"""Turning a running decode into text that only grows, and per-token log-probabilities."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import torch

from solm.core.systems.pasta import MAIN


class TextStream:
    """Incremental detokenization: feed the ids that are final so far (a list that only
    grows), get the new text. Text that ends in an incomplete UTF-8 character is held back
    until the character completes, so what was sent never has to be taken back."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids_seen = 0
        self.sent = ""

    def update(self, final_ids: list[int]) -> str:
        if len(final_ids) == self.ids_seen:
            return ""
        self.ids_seen = len(final_ids)
        text = self.tokenizer.decode(final_ids, skip_special_tokens=True)
        if text.endswith("\ufffd") or not text.startswith(self.sent):
            return ""
        delta, self.sent = text[len(self.sent):], text
        return delta

    def finish(self, final_text: str) -> str:
        """The rest of the answer once decoding ended (blocks a stop cut short included)."""
        if not final_text.startswith(self.sent):
            return ""  # cannot happen for a prefix of the same ids; never resend
        delta, self.sent = final_text[len(self.sent):], final_text
        return delta


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


def recording_chooser(chooser: Callable, sink: list[TokenLogprob], top_k: int) -> Callable:
    """Wrap a runtime chooser: each token the main thread chooses is logged with its
    log-probability under the model (before sampling settings) and the `top_k` best."""

    def choose(thread, logits: torch.Tensor, state) -> int:
        tok = chooser(thread, logits, state)
        if thread.tid == MAIN:
            logp = torch.log_softmax(logits.float(), dim=-1)
            top = []
            if top_k:
                vals, idx = torch.topk(logp, top_k)
                top = [(int(i), float(v)) for i, v in zip(idx, vals)]
            sink.append(TokenLogprob(tok, float(logp[tok]), top))
        return tok

    return choose


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-to-unicode table, inverted (byte-level BPE tokens back to bytes)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def token_bytes(tokenizer, token_id: int) -> bytes:
    """The bytes a token stands for (a byte-level BPE piece may be part of a character)."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    table = _byte_decoder()
    if isinstance(piece, str) and piece and all(c in table for c in piece):
        return bytes(table[c] for c in piece)
    return tokenizer.decode([token_id]).encode("utf-8")


def token_text(tokenizer, token_id: int) -> str:
    return token_bytes(tokenizer, token_id).decode("utf-8", errors="replace")
