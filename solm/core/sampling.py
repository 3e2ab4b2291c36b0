"""Next-token choice from logits: greedy, temperature, top-p, seeded, for a whole batch of
rows on their own device with one copy of the chosen ids back to the host."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from solm.core.counter_noise import gumbel, row_keys
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
    def __init__(self, config: SamplingConfig, exempt: Sequence[int] = (),
                 always_allowed: Sequence[int] = ()):
        """`exempt`: ids the repetition penalty never touches (control tokens, EOS, formatting);
        `always_allowed`: ids the n-gram ban never removes (control tokens, EOS), so a thread
        can always close. Draws are made on the logits' device (`choose_tokens`)."""
        self.config = config
        self.exempt = set(int(t) for t in exempt)
        self.always_allowed = set(int(t) for t in always_allowed)
        self.draws = 0  # the next draw number of `__call__`'s stream

    def draw(self, banned: torch.Tensor | None = None, history: Sequence[int] = (),
             stream: int = 0, index: int = 0, bias: Sequence[tuple[int, float]] = (),
             given: int | None = None) -> "Draw":
        """One row's request for `choose_tokens`; `(stream, index)` names its noise."""
        return Draw(self, banned, tuple(history), stream, index, tuple(bias), given)

    def __call__(self, logits: torch.Tensor, banned: torch.Tensor | None = None,
                 history: Sequence[int] = ()) -> int:
        """Choose one token from a 1-D logits row; `banned` is a bool mask of forbidden ids;
        `history` the tokens already written (for the repetition penalty, as in CTRL / HF:
        positive logits divided by the penalty, negative ones multiplied). Draws of one
        sampler are numbered 0, 1, 2... on stream 0."""
        index, self.draws = self.draws, self.draws + 1
        return choose_tokens(logits[None], [self.draw(banned, history, 0, index)])[0][0]


@dataclass(frozen=True)
class Draw:
    """What one logits row's choice needs: its sampler (settings, exempt and always-allowed
    ids), banned ids, the thread's history, the noise's coordinates (stream, index), logit
    biases added first, and `given`: a token already decided (replay, a forced token), for
    which only the log-prob is computed."""

    sampler: Sampler
    banned: torch.Tensor | None = None
    history: tuple[int, ...] = ()
    stream: int = 0
    index: int = 0
    bias: tuple[tuple[int, float], ...] = ()
    given: int | None = None


def choose_tokens(logits: torch.Tensor, draws: Sequence[Draw], logprobs: bool = False,
                  logprob_temperatures: Sequence[float] | None = None
                  ) -> tuple[list[int], list[float] | None]:
    """The next token of every row of `logits` [B, V] (`choose_on_device`), with one copy
    to the host for the whole batch: the chosen ids, and with `logprobs` each id's raw
    log-prob under the unmodified row (or under the row divided by
    `logprob_temperatures[i]` where given)."""
    ids, lp = choose_on_device(logits, draws, logprobs, logprob_temperatures)
    if lp is None:
        return ids.tolist(), None
    chosen, values = torch.stack([ids.double(), lp.double()]).tolist()
    return [int(t) for t in chosen], values


def choose_on_device(logits: torch.Tensor, draws: Sequence[Draw], logprobs: bool = False,
                     logprob_temperatures: Sequence[float] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`choose_tokens` without the copy: the ids [B] (and log-probs [B]) stay on the
    logits' device, for a caller that copies them with more of its pass's results. Row i
    follows `draws[i]`: bias, repetition penalty, banned ids, n-gram ban (never the row's
    last allowed token), then greedy (temperature 0) or a draw from the temperature-scaled,
    top-p-truncated distribution by the Gumbel-max trick with counter-based noise keyed by
    (seed, stream, index). Nothing here reads a device value."""
    b, v = logits.shape
    if len(draws) != b:
        raise ValueError(f"{len(draws)} draws for {b} logits rows")
    device = logits.device
    x = logits
    biased = [(r, int(t), float(val)) for r, d in enumerate(draws) for t, val in d.bias]
    if biased:
        x = x.clone()
        for r, t, val in biased:  # in the logits' own dtype, as a row's `+=` rounds
            x[r, t] += val
    x = x.float()
    if x is logits:
        x = x.clone()
    _penalize(x, draws)
    banned = [d.banned for d in draws]
    if any(m is not None for m in banned):
        none = torch.zeros(v, dtype=torch.bool, device=device)
        mask = torch.stack([none if m is None else m[:v].to(device) for m in banned])
        x = x.masked_fill(mask, float("-inf"))
    x = _ban_repeated_ngrams(x, draws)
    ids = torch.argmax(x, dim=-1)
    sampled = [r for r, d in enumerate(draws)
               if d.given is None and d.sampler.config.temperature > 0]
    if sampled:
        ids = ids.index_copy(0, torch.tensor(sampled, device=device),
                             _sample_rows(x, [draws[r] for r in sampled], sampled))
    given = [(r, d.given) for r, d in enumerate(draws) if d.given is not None]
    if given:
        rows, toks = zip(*given)
        ids = ids.index_copy(0, torch.tensor(rows, device=device),
                             torch.tensor(toks, device=device))
    if not logprobs:
        return ids, None
    raw = logits.float()
    if logprob_temperatures is not None:
        raw = raw / torch.tensor(list(logprob_temperatures), dtype=raw.dtype,
                                 device=device)[:, None]
    return ids, torch.log_softmax(raw, dim=-1).gather(1, ids[:, None])[:, 0]


def _penalize(x: torch.Tensor, draws: Sequence[Draw]) -> None:
    rows, toks, factors = [], [], []
    for r, d in enumerate(draws):
        penalty = d.sampler.config.repetition_penalty
        if penalty == 1.0 or not d.history:
            continue
        seen = sorted(set(d.history) - d.sampler.exempt)
        rows += [r] * len(seen)
        toks += seen
        factors += [penalty] * len(seen)
    if not rows:
        return
    index = (torch.tensor(rows, device=x.device), torch.tensor(toks, device=x.device))
    factor = torch.tensor(factors, dtype=x.dtype, device=x.device)
    vals = x[index]
    x[index] = torch.where(vals > 0, vals / factor, vals * factor)


def _ban_repeated_ngrams(x: torch.Tensor, draws: Sequence[Draw]) -> torch.Tensor:
    rows, toks = [], []
    for r, d in enumerate(draws):
        repeats = repeated_ngram_continuations(d.history, d.sampler.config.no_repeat_ngram)
        repeats -= d.sampler.always_allowed
        rows += [r] * len(repeats)
        toks += sorted(repeats)
    if not rows:
        return x
    kept = x.index_put((torch.tensor(rows, device=x.device), torch.tensor(toks, device=x.device)),
                       torch.tensor(float("-inf"), device=x.device))
    allowed = torch.isfinite(kept).any(dim=-1, keepdim=True)  # never ban the last allowed
    return torch.where(allowed, kept, x)


def _sample_rows(x: torch.Tensor, draws: Sequence[Draw], rows: Sequence[int]) -> torch.Tensor:
    """A token per sampled row: temperature, top-p, then argmax(log p + Gumbel noise)."""
    device = x.device
    cfgs = [d.sampler.config for d in draws]
    temps = torch.tensor([c.temperature for c in cfgs], device=device)
    probs = torch.softmax(x[torch.tensor(rows, device=device)] / temps[:, None], dim=-1)
    nucleus = [i for i, c in enumerate(cfgs) if c.top_p < 1.0]
    if nucleus:
        at = torch.tensor(nucleus, device=device)
        top_p = torch.tensor([cfgs[i].top_p for i in nucleus], device=device)
        sorted_p, order = torch.sort(probs[at], dim=-1, descending=True)
        keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < top_p[:, None]
        keep[:, 0] = True
        probs = probs.index_copy(0, at, torch.zeros_like(sorted_p).scatter(
            1, order, sorted_p * keep))
    keys = row_keys(torch.tensor([c.seed for c in cfgs], device=device),
                    torch.tensor([d.stream for d in draws], device=device),
                    torch.tensor([d.index for d in draws], device=device))
    return torch.argmax(torch.log(probs) + gumbel(keys, x.shape[-1]), dim=-1)


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
