"""Next-token choice from logits: greedy, temperature, top-p, seeded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from solm.core.settings import setting

MAX_SEED = 2**32 - 1  # seeds are 0..2^32-1 everywhere (CLI flags and server requests)


@dataclass
class SamplingConfig:
    """How each next token is chosen. All but the seed are settings a model's
    `generation_config.json` may carry (`solm.core.generation`): a decode command's flag
    overrides the model's value, which overrides these defaults."""

    # at most 2, as OpenAI's API bounds a request's (a server's default must be one a
    # request could send; beyond it sampling is near uniform noise)
    temperature: float = setting(0.0, "Sampling temperature; 0 = greedy.", min=0.0, max=2.0)
    top_p: float = setting(1.0, "Nucleus sampling mass.", above=0.0, max=1.0)
    seed: int = setting(0, "Sampling seed (ignored when greedy).", min=0, max=MAX_SEED)
    repetition_penalty: float = setting(
        1.0, "Above 1 discourages tokens a thread already wrote (control tokens exempt); small "
        "models loop without it.", above=0.0)
    no_repeat_ngram: int = setting(0, "N > 0: a thread may not repeat an N-gram it already "
                                      "wrote (0 = off).", min=0)


class Sampler:
    def __init__(self, config: SamplingConfig, device: str | torch.device = "cpu",
                 exempt: Sequence[int] = (), always_allowed: Sequence[int] = ()):
        """`exempt`: ids the repetition penalty never touches (control tokens, EOS, formatting);
        `always_allowed`: ids the n-gram ban never removes (control tokens, EOS), so a thread
        can always close."""
        self.config = config
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(config.seed)
        self.exempt = set(int(t) for t in exempt)
        self.always_allowed = set(int(t) for t in always_allowed)

    def __call__(self, logits: torch.Tensor, banned: torch.Tensor | None = None,
                 history: Sequence[int] = ()) -> int:
        """Choose one token from a 1-D logits row; `banned` is a bool mask of forbidden ids;
        `history` the tokens already written (for the repetition penalty, as in CTRL / HF:
        positive logits divided by the penalty, negative ones multiplied)."""
        logits = logits.float()
        penalty = self.config.repetition_penalty
        if penalty != 1.0 and history:
            seen = torch.tensor(sorted(set(int(t) for t in history) - self.exempt),
                                dtype=torch.long, device=logits.device)
            if seen.numel():
                vals = logits[seen]
                logits = logits.clone()
                logits[seen] = torch.where(vals > 0, vals / penalty, vals * penalty)
        if banned is not None:
            logits = logits.masked_fill(banned[: logits.shape[-1]], float("-inf"))
        repeats = repeated_ngram_continuations(history, self.config.no_repeat_ngram)
        repeats -= self.always_allowed
        if repeats:
            idx = torch.tensor(sorted(repeats), dtype=torch.long, device=logits.device)
            kept = logits.index_fill(0, idx, float("-inf"))
            if torch.isfinite(kept).any():  # never ban the last allowed token
                logits = kept
        t = self.config.temperature
        if t <= 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / t, dim=-1)
        if self.config.top_p < 1.0:
            sorted_p, idx = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < self.config.top_p
            keep[0] = True
            probs = torch.zeros_like(probs).scatter_(0, idx[keep], sorted_p[keep])
        # drawn where the generator lives (the CPU): a seed gives the same draws whatever
        # device computed the logits, and a CUDA row needs no CUDA generator
        return int(torch.multinomial(probs.to(self.generator.device), 1,
                                     generator=self.generator))


def repeated_ngram_continuations(history: Sequence[int], n: int) -> set[int]:
    """Tokens that would complete an n-gram already present in `history` (as HF's
    `no_repeat_ngram_size`): the ones that followed earlier occurrences of its last n-1 tokens."""
    if n <= 0 or len(history) < n:
        return set()
    hist = [int(t) for t in history]
    prefix = hist[len(hist) - n + 1:]
    return {hist[i + n - 1] for i in range(len(hist) - n + 1) if hist[i:i + n - 1] == prefix}


_FORMATTING_CACHE: dict[tuple[int, int], list[int]] = {}


def formatting_token_ids(tokenizer) -> list[int]:
    """Ids whose text is only whitespace, digits or punctuation (list markers, newlines,
    numbering): the repetition penalty leaves them alone, since lists repeat them by design.
    Computed once per tokenizer object."""
    key = (id(tokenizer), len(tokenizer))
    if key not in _FORMATTING_CACHE:
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        _FORMATTING_CACHE[key] = [i for i, p in enumerate(pieces)
                                  if p and all(not c.isalpha() for c in p)]
    return _FORMATTING_CACHE[key]
