"""Batched on-device sampling (`choose_tokens`) against per-row oracles written another way:
Python integers for the noise's hash, plain lists and `math` for the choice."""

from __future__ import annotations

import math
import random

import pytest
import torch

from solm.core.counter_noise import gumbel, mix32, row_keys, uniforms
from solm.core.sampling import Sampler, SamplingConfig, choose_on_device, choose_tokens

M = 0xFFFFFFFF


def py_mix(x: int) -> int:
    """lowbias32 on Python integers (arbitrary precision, then reduced mod 2^32)."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M
    x ^= x >> 15
    x = (x * 0x846CA68B) & M
    return x ^ (x >> 16)


def py_uniform(seed: int, stream: int, index: int, token: int) -> float:
    key = py_mix(py_mix(py_mix(seed & M) ^ (stream & M)) ^ (index & M))
    bits = py_mix(py_mix((key + token * 0x9E3779B9) & M))
    return ((bits >> 8) + 0.5) / 2 ** 24


def test_the_hash_is_exact_32_bit_arithmetic():
    xs = [0, 1, 2, 0x7FFFFFFF, 0x80000000, M, 123456789, 0xDEADBEEF]
    assert mix32(torch.tensor(xs)).tolist() == [py_mix(x) for x in xs]


def test_uniforms_are_a_function_of_their_coordinates():
    seeds, streams, idx = [0, 7, 2 ** 32 - 1], [0, 3, 1], [0, 5, 99]
    keys = row_keys(torch.tensor(seeds), torch.tensor(streams), torch.tensor(idx))
    u = uniforms(keys, 40)
    for r in range(3):
        for t in range(40):
            assert u[r, t].item() == pytest.approx(py_uniform(seeds[r], streams[r], idx[r], t),
                                                   abs=0, rel=1e-7)
    assert (u > 0).all() and (u < 1).all()
    g = gumbel(keys, 40)
    assert torch.equal(g, -torch.log(-torch.log(u)))


def oracle_choice(row: list[float], cfg: SamplingConfig, banned: set[int], history: list[int],
                  stream: int, index: int, bias: list[tuple[int, float]], exempt: set[int],
                  ngram_ban: set[int]) -> int:
    """One row, the rule in plain Python."""
    x = list(row)
    for t, b in bias:
        x[t] += b
    if cfg.repetition_penalty != 1.0:
        for t in set(history) - exempt:
            x[t] = x[t] / cfg.repetition_penalty if x[t] > 0 else x[t] * cfg.repetition_penalty
    x = [-math.inf if t in banned else val for t, val in enumerate(x)]
    if ngram_ban and any(val > -math.inf for t, val in enumerate(x) if t not in ngram_ban):
        x = [-math.inf if t in ngram_ban else val for t, val in enumerate(x)]
    if cfg.temperature <= 0:
        return max(range(len(x)), key=lambda t: (x[t], -t))
    top = max(x)
    w = [math.exp((val - top) / cfg.temperature) if val > -math.inf else 0.0 for val in x]
    total = sum(w)
    p = [val / total for val in w]
    if cfg.top_p < 1.0:
        order = sorted(range(len(p)), key=lambda t: -p[t])
        kept, mass = set(), 0.0
        for t in order:
            if mass < cfg.top_p or not kept:
                kept.add(t)
            mass += p[t]
        p = [val if t in kept else 0.0 for t, val in enumerate(p)]
    score = [math.log(val) - math.log(-math.log(py_uniform(cfg.seed, stream, index, t)))
             if val > 0 else -math.inf for t, val in enumerate(p)]
    return max(range(len(score)), key=lambda t: score[t])


def ngram_continuations(history: list[int], n: int) -> set[int]:
    if n <= 0 or len(history) < n:
        return set()
    tail = tuple(history[len(history) - n + 1:])
    return {history[i + n - 1] for i in range(len(history) - n + 1)
            if tuple(history[i:i + n - 1]) == tail}


@pytest.mark.parametrize("case", range(6))
def test_a_batch_equals_each_row_chosen_by_the_oracle(case):
    rnd = random.Random(case)
    v, b = 37, 12
    logits = torch.randn(b, v, generator=torch.Generator().manual_seed(case)) * 3
    exempt, always = {0, 1}, {1}
    draws, expected = [], []
    for r in range(b):
        cfg = SamplingConfig(temperature=rnd.choice([0.0, 0.5, 1.0, 1.7]),
                             top_p=rnd.choice([1.0, 0.9, 0.5]), seed=rnd.randrange(2 ** 32),
                             repetition_penalty=rnd.choice([1.0, 1.3]),
                             no_repeat_ngram=rnd.choice([0, 2, 3]))
        sampler = Sampler(cfg, exempt=exempt, always_allowed=always)
        history = [rnd.randrange(6) for _ in range(rnd.randrange(12))]
        banned_ids = set(rnd.sample(range(v), rnd.randrange(4)))
        banned = torch.zeros(v, dtype=torch.bool)
        banned[list(banned_ids)] = True
        bias = [(rnd.randrange(v), rnd.uniform(-2, 2))] if rnd.random() < 0.4 else []
        stream, index = rnd.randrange(5), rnd.randrange(1000)
        draws.append(sampler.draw(banned if banned_ids else None, history, stream, index, bias))
        ban = ngram_continuations(history, cfg.no_repeat_ngram) - always
        expected.append(oracle_choice(logits[r].tolist(), cfg, banned_ids, history, stream,
                                      index, bias, exempt, ban))
    ids, _ = choose_tokens(logits, draws)
    assert ids == expected


def test_a_row_chooses_the_same_alone_and_in_any_batch():
    v = 50
    logits = torch.randn(8, v, generator=torch.Generator().manual_seed(3))
    draws = [Sampler(SamplingConfig(temperature=1.0, top_p=0.9, seed=s)).draw(
        stream=s % 3, index=s) for s in range(8)]
    together, _ = choose_tokens(logits, draws)
    alone = [choose_tokens(logits[r:r + 1], [draws[r]])[0][0] for r in range(8)]
    perm = [5, 2, 7, 0, 1, 6, 3, 4]
    shuffled, _ = choose_tokens(logits[perm], [draws[r] for r in perm])
    assert together == alone == [together[r] for r in range(8)]
    assert shuffled == [together[r] for r in perm]


def test_draws_follow_the_distribution():
    probs = torch.tensor([0.5, 0.25, 0.15, 0.1])
    logits = probs.log().expand(4000, 4).contiguous()
    sampler = Sampler(SamplingConfig(temperature=1.0, seed=11))
    ids, _ = choose_tokens(logits, [sampler.draw(index=i) for i in range(4000)])
    counts = torch.bincount(torch.tensor(ids), minlength=4).float()
    expected = probs * 4000
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 16.3  # the 99.9th percentile of chi-square with 3 degrees of freedom


def test_seeds_streams_and_indices_each_change_the_draws():
    logits = torch.zeros(400, 64)

    def draws(**kw):
        base = dict(seed=1, stream=0)
        base.update(kw)
        s = Sampler(SamplingConfig(temperature=1.0, seed=base["seed"]))
        return choose_tokens(logits, [s.draw(stream=base["stream"], index=i)
                                      for i in range(400)])[0]

    reference = draws()
    assert draws() == reference
    for other in (draws(seed=2), draws(stream=1)):
        assert sum(a != b for a, b in zip(reference, other)) > 300


def test_logprobs_are_the_raw_rows_at_the_chosen_ids():
    logits = torch.randn(5, 30, generator=torch.Generator().manual_seed(0))
    s = Sampler(SamplingConfig(temperature=1.0, repetition_penalty=1.5, seed=4))
    draws = [s.draw(history=[1, 2, 3], index=i, bias=[(7, 3.0)]) for i in range(4)]
    draws.append(s.draw(given=9))
    ids, lps = choose_tokens(logits, draws, logprobs=True)
    assert ids[4] == 9
    raw = torch.log_softmax(logits, -1)
    assert lps == pytest.approx([float(raw[r, t]) for r, t in enumerate(ids)], abs=1e-6)


def test_a_samplers_calls_are_its_stream_draws_in_order():
    logits = torch.randn(30, generator=torch.Generator().manual_seed(1))
    cfg = SamplingConfig(temperature=1.0, seed=6)
    s = Sampler(cfg)
    by_call = [s(logits) for _ in range(20)]
    by_index = choose_tokens(logits.expand(20, 30),
                             [Sampler(cfg).draw(index=i) for i in range(20)])[0]
    assert by_call == by_index
    assert len(set(by_call)) > 3


def test_greedy_rows_take_the_argmax_after_the_rules():
    logits = torch.tensor([[0.0, 5.0, 4.0, 1.0]])
    s = Sampler(SamplingConfig(repetition_penalty=2.0), exempt=[])
    assert choose_tokens(logits, [s.draw()])[0] == [1]
    assert choose_tokens(logits, [s.draw(history=[1])])[0] == [2]
    banned = torch.tensor([False, True, True, False])
    assert choose_tokens(logits, [s.draw(banned, history=[1])])[0] == [3]


def test_a_pasta_decode_draws_each_token_by_the_documented_key(tiny, pasta_tokenizer):
    """A sampled sequential decode's k-th token is the rule's draw with the noise of
    (seed, thread 0, index k) on the logits the decode recorded: the runtime keys its draws
    by the thread's token count, as the docs say."""
    from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime

    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=256)
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=24, record_logits=True,
                            sampling=SamplingConfig(temperature=1.3, top_p=0.95, seed=17))
    res = rt.generate([5, 6, 7, 8], cfg)
    sampler = Sampler(cfg.sampling)
    banned = rt.grammar.sequential
    expected = [choose_tokens(res.logits[k:k + 1], [sampler.draw(banned, res.ids[:k], 0, k)])
                [0][0] for k in range(len(res.ids))]
    assert res.ids == expected and len(set(res.ids)) > 5


@pytest.mark.parametrize("penalty", [1.5, 2.0])
def test_the_repetition_penalty_pushes_seen_logits_down_whatever_their_sign(penalty):
    """CTRL's rule on hand-made logits: a seen token's positive logit divided by the
    penalty, its negative logit multiplied by it (both move down); unseen and exempt tokens
    untouched. Each pair is built so that the rule and its sign-flipped mistake choose
    different tokens."""
    seen_pos, rival_pos = 2.0, 2.0 / penalty + 0.1  # 2/p < rival < 2*p
    seen_neg, rival_neg = -1.0, -1.0 * penalty + 0.1  # -p < rival < -1/p
    logits = torch.full((4, 8), -50.0)
    logits[0, 3], logits[0, 4] = seen_pos, rival_pos
    logits[1, 3], logits[1, 4] = seen_neg, rival_neg
    logits[2, 3], logits[2, 4] = seen_neg, rival_neg  # 3 exempt in this row: untouched
    logits[3, 5], logits[3, 4] = seen_pos, rival_pos  # 5 unseen: untouched
    cfg = SamplingConfig(temperature=0.0, repetition_penalty=penalty)
    draws = [Sampler(cfg, exempt=set()).draw(history=[3, 3, 1]),
             Sampler(cfg, exempt=set()).draw(history=[3]),
             Sampler(cfg, exempt={3}).draw(history=[3]),
             Sampler(cfg, exempt=set()).draw(history=[3])]
    ids, logp = choose_on_device(logits, draws, logprobs=True)
    assert ids.tolist() == [4, 4, 3, 5]
