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
                  logprob_temperatures: Sequence[float] | None = None,
                  rows: Sequence[int] | None = None) -> tuple[list[int], list[float] | None]:
    """The next token of every row of `logits` [B, V] (`choose_on_device`; `rows`: only
    those rows, draw i for row `rows[i]`), with one copy to the host for the whole batch:
    the chosen ids, and with `logprobs` each id's raw log-prob under the unmodified row (or
    under the row divided by `logprob_temperatures[i]` where given)."""
    ids, lp = choose_on_device(logits, draws, logprobs, logprob_temperatures, rows)
    if lp is None:
        return ids.tolist(), None
    chosen, values = torch.stack([ids.double(), lp.double()]).tolist()
    return [int(t) for t in chosen], values


def choose_on_device(logits: torch.Tensor, draws: Sequence[Draw], logprobs: bool = False,
                     logprob_temperatures: Sequence[float] | None = None,
                     rows: Sequence[int] | None = None, staging=None,
                     table: "RowTable | None" = None
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`choose_tokens` without the copy: the ids [B] (and log-probs [B]) stay on the
    logits' device, for a caller that copies them with more of its pass's results. Row i
    follows `draws[i]`: bias, repetition penalty, banned ids, n-gram ban (never the row's
    last allowed token), then greedy (temperature 0) or a draw from the temperature-scaled,
    top-p-truncated distribution by the Gumbel-max trick with counter-based noise keyed by
    (seed, stream, index). Nothing here reads a device value.

    What a GPU pays: every row's host data (settings, noise coordinates, given tokens, the
    (row, token) pairs of biases, penalties and n-gram bans) goes up in one copy
    (`RowTable`); banned masks are read from a device copy of each distinct mask (a grammar
    state's, kept across passes); the ops are the same few whatever the batch."""
    b, v = logits.shape
    if len(draws) != (b if rows is None else len(rows)):
        raise ValueError(f"{len(draws)} draws for {b if rows is None else len(rows)} rows")
    device = logits.device
    table = table or RowTable(draws, v, rows, logprob_temperatures)
    t = table.upload(device, staging)
    if rows is not None:  # the rows asked for, gathered by the table's own row column
        logits = logits.index_select(0, t["row"])
    x = logits.float() if logits.dtype != torch.float32 else logits.clone()
    if table.bias_pairs:
        rows, toks, vals = t["bias"]
        # in the logits' own dtype, as a row's `+=` rounds, then float
        biased = logits.index_put((rows, toks), vals.to(logits.dtype), accumulate=True)
        x = biased.float()
    if table.penalty_pairs:
        rows, toks, factor = t["penalty"]
        vals = x[rows, toks]
        x = x.index_put((rows, toks), torch.where(vals > 0, vals / factor, vals * factor))
    if table.masks:
        stack = torch.stack([_on_device(m, device, v) for m in table.masks])
        mask = stack[t["mask"].clamp(min=0)] & (t["mask"] >= 0)[:, None]
        x = x.masked_fill(mask, float("-inf"))
    if table.ngram_pairs:
        rows, toks = t["ngram"]
        kept = x.index_put((rows, toks), torch.full_like(rows, float("-inf"), dtype=x.dtype))
        allowed = torch.isfinite(kept).any(dim=-1, keepdim=True)  # never ban the last allowed
        x = torch.where(allowed, kept, x)
    ids = torch.argmax(x, dim=-1)
    if table.sampled:
        ids = torch.where(t["sampled"], _sample_rows(x, t), ids)
    if table.given:
        ids = torch.where(t["given"] >= 0, t["given"], ids)
    if not logprobs:
        return ids, None
    raw = logits.float()
    if logprob_temperatures is not None:
        raw = raw / t["logprob_temperature"].float()[:, None]
    return ids, torch.log_softmax(raw, dim=-1).gather(1, ids[:, None])[:, 0]


class RowTable:
    """The host data of one batch of draws, packed into one float64 list and uploaded once:
    per row its temperature, top-p, seed, stream, index, given token (-1: none), banned
    mask (an index into `masks`, the distinct masks, -1: none) and whether it samples; then
    the (row, token, value) triples of its biases, the (row, token, factor) triples of its
    penalised tokens and the (row, token) pairs its n-gram ban removes."""

    COLUMNS = ("temperature", "top_p", "seed", "stream", "index", "given", "mask", "sampled",
               "row", "logprob_temperature")

    def __init__(self, draws: Sequence[Draw], vocab: int, rows: Sequence[int] | None = None,
                 logprob_temperatures: Sequence[float] | None = None):
        self.rows = len(draws)
        self.row_list = None if rows is None else list(rows)
        self.masks: list[torch.Tensor] = []
        seen: dict[int, int] = {}
        columns: list[list[float]] = [[] for _ in self.COLUMNS]
        self.bias_pairs: list[tuple[int, int, float]] = []
        self.penalty_pairs: list[tuple[int, int, float]] = []
        self.ngram_pairs: list[tuple[int, int]] = []
        for r, d in enumerate(draws):
            cfg = d.sampler.config
            sampled = d.given is None and cfg.temperature > 0
            if d.banned is None:
                mask = -1
            else:
                mask = seen.setdefault(id(d.banned), len(self.masks))
                if mask == len(self.masks):
                    self.masks.append(d.banned)
            for column, value in zip(columns, (
                    cfg.temperature if sampled else 1.0, cfg.top_p, cfg.seed, d.stream,
                    d.index, -1 if d.given is None else d.given, mask, float(sampled),
                    r if rows is None else rows[r],
                    1.0 if logprob_temperatures is None else logprob_temperatures[r])):
                column.append(float(value))
            self.bias_pairs += [(r, int(t), float(val)) for t, val in d.bias]
            if cfg.repetition_penalty != 1.0 and d.history:
                self.penalty_pairs += [(r, t, cfg.repetition_penalty)
                                       for t in sorted(set(d.history) - d.sampler.exempt)
                                       if t < vocab]
            banned = repeated_ngram_continuations(d.history, cfg.no_repeat_ngram) \
                - d.sampler.always_allowed
            self.ngram_pairs += [(r, t) for t in sorted(banned) if t < vocab]
        self.columns = columns
        self.sampled = any(columns[self.COLUMNS.index("sampled")])
        self.given = any(g >= 0 for g in columns[self.COLUMNS.index("given")])

    STAGED = "sampling"  # its part's name in a pass's staging

    def flat(self) -> list[float]:
        out = [v for column in self.columns for v in column]
        for triples in (self.bias_pairs, self.penalty_pairs):
            out += [a for a, _, _ in triples] + [b for _, b, _ in triples] + \
                [c for _, _, c in triples]
        return out + [a for a, _ in self.ngram_pairs] + [b for _, b in self.ngram_pairs]

    def stage(self, staging) -> "RowTable":
        """Put the table into a pass's staging, to go up with the step's data."""
        staging.put(self.STAGED, self.flat())
        self.staging = staging
        return self

    def upload(self, device, staging=None) -> dict[str, object]:
        """The table on `device`, from one copy (its own, or the pass's `staging`): columns
        by name, and the pairs' tensors."""
        staging = staging or getattr(self, "staging", None)
        if staging is not None:
            if self.STAGED not in staging._parts and self.STAGED not in staging._on_device:
                self.stage(staging)
            data = staging.get(self.STAGED)
        else:
            data = torch.tensor(self.flat(), dtype=torch.float64)
            if device.type != "cpu":
                data = data.to(device, non_blocking=True)
        out: dict[str, object] = {}
        at, n = 0, self.rows
        for name in self.COLUMNS:
            out[name] = data[at:at + n]
            at += n
        for name in ("given", "mask", "seed", "stream", "index", "row"):
            out[name] = out[name].long()
        out["sampled"] = out["sampled"] > 0
        for name, triples in (("bias", self.bias_pairs), ("penalty", self.penalty_pairs)):
            k = len(triples)
            rows, toks, vals = data[at:at + k].long(), data[at + k:at + 2 * k].long(), \
                data[at + 2 * k:at + 3 * k]
            out[name] = (rows, toks, vals.float())
            at += 3 * k
        k = len(self.ngram_pairs)
        out["ngram"] = (data[at:at + k].long(), data[at + k:at + 2 * k].long())
        return out


_DEVICE_MASKS: dict[tuple[int, str, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _on_device(mask: torch.Tensor, device, vocab: int) -> torch.Tensor:
    """A banned mask's first `vocab` ids on `device`, copied there once per mask object (a
    grammar state's mask lives as long as its runtime; the cache holds it by identity, and
    the source beside the copy keeps the identity from being reused)."""
    if mask.device == device and mask.shape[0] == vocab:
        return mask
    key = (id(mask), str(device), vocab)
    hit = _DEVICE_MASKS.get(key)
    if hit is None or hit[0] is not mask:
        if len(_DEVICE_MASKS) > 256:
            _DEVICE_MASKS.clear()
        hit = (mask, mask[:vocab].to(device))
        _DEVICE_MASKS[key] = hit
    return hit[1]


def _sample_rows(x: torch.Tensor, t: dict) -> torch.Tensor:
    """A token per row (the caller keeps the sampled rows' only): temperature, top-p, then
    argmax(log p + Gumbel noise)."""
    probs = torch.softmax(x / t["temperature"].float()[:, None], dim=-1)
    top_p = t["top_p"].float()
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < top_p[:, None]
    keep[:, 0] = True
    keep = keep | (top_p >= 1.0)[:, None]
    probs = torch.zeros_like(sorted_p).scatter(1, order, sorted_p * keep)
    keys = row_keys(t["seed"], t["stream"], t["index"])
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
