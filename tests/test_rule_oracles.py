"""The rules of BoNBoN's score (`solm.prefs.score`), the promise guards
(`solm.decode.pasta.guards`), the own-answer rules and the distill job's bookkeeping
(`solm.annotate.own_answers`, `solm.prefs.distill_job`), each checked against an oracle
written another way, over inputs drawn at random, so that a one-line change to a rule fails."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings, strategies as st

from solm.annotate import own_answers as oa
from solm.decode.pasta import guards
from solm.prefs import distill_job
from solm.prefs import score as sc

# ---- BoNBoN's score -------------------------------------------------------------------

samples = st.lists(st.tuples(st.booleans(), st.booleans(), st.sampled_from([0.5, 1.0, 2.0]),
                             st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0])),
                             st.sampled_from([0.0, 0.25])), min_size=0, max_size=6)


def oracle_pair(rows, weight):
    """(best index, worst index, reason) written from the docstring's words."""
    if len(rows) < 2:
        return None, None, sc.ONE_DISTINCT
    if not any(r.well_formed for r in rows):
        return None, None, sc.NO_WELL_FORMED
    ok = [r for r in rows if r.well_formed and not r.too_short]
    if not ok:
        return None, None, sc.ALL_TOO_SHORT

    def rank(r):
        q = r.quality if r.quality is not None else 0.0
        if weight == math.inf:
            return (r.well_formed and not r.too_short, q - r.penalty, r.speedup)
        return (r.well_formed and not r.too_short, r.speedup + weight * q - r.penalty)

    top = max(rank(r) for r in rows)
    bottom = min(rank(r) for r in rows)
    if top == bottom:
        return None, None, sc.TIED
    best = min(r.sample for r in rows if rank(r) == top)  # ties: the earlier is better
    worst = max(r.sample for r in rows if rank(r) == bottom)
    return best, worst, None


@settings(max_examples=400, deadline=None)
@given(rows=samples, weight=st.sampled_from([0.0, 0.5, 3.0, math.inf]))
def test_the_pair_is_the_oracles(rows, weight):
    scored = [sc.Scored(sample=i, well_formed=wf, speedup=sp, quality=q, too_short=short,
                        penalty=pen) for i, (wf, short, sp, q, pen) in enumerate(rows)]
    got = sc.choose_pair(scored, weight)
    best, worst, reason = oracle_pair(scored, weight)
    assert got.skipped == reason and got.n == len(scored)
    assert (got.chosen.sample if got.chosen else None) == best
    assert (got.rejected.sample if got.rejected else None) == worst
    if got.chosen:
        assert got.chosen.eligible


@settings(max_examples=200, deadline=None)
@given(content=st.integers(0, 300), path=st.integers(0, 300), base=st.integers(0, 300),
       words=st.lists(st.sampled_from("a b c".split()), max_size=12),
       mu=st.sampled_from([0.0, 1.0, 3.0]))
def test_content_terms_follow_their_definitions(content, path, base, words, mu):
    saved, ratio, penalty = sc.content_terms(content, path, base, " ".join(words), mu)
    assert saved == pytest.approx(1 - path / (content if content > 0 else 1))
    assert ratio == pytest.approx(min(1.0, content / (base if base > 0 else 1)))
    grams = list(zip(words, words[1:], words[2:]))
    repeats = sum(1 for i, g in enumerate(grams) if g in grams[:i])
    assert penalty == pytest.approx(mu * (repeats / len(grams) if grams else 0.0))


@settings(max_examples=200, deadline=None)
@given(seqs=st.lists(st.lists(st.integers(0, 2), max_size=3), max_size=8))
def test_distinct_keeps_first_copies_and_counts(seqs):
    got = sc.distinct(seqs)
    seen = []
    for s in seqs:
        if s not in seen:
            seen.append(s)
    assert [seqs[i] for i, _ in got] == seen
    assert [c for _, c in got] == [seqs.count(s) for s in seen]
    assert all(seqs.index(seqs[i]) == i for i, _ in got)


@pytest.mark.parametrize("text,value", [("0", 0.0), ("2.5", 2.5), ("inf", math.inf),
                                        ("-1", None), ("nan", None), ("fast", None)])
def test_the_quality_weight_parses_or_says_why(text, value):
    if value is None:
        with pytest.raises(ValueError, match=f"--quality-weight must be a number >= 0 or inf, "
                                             f"got '{text}'"):
            sc.parse_quality_weight(text)
    else:
        assert sc.parse_quality_weight(text) == value


def test_score_value_at_each_weight():
    s = sc.Scored(0, True, speedup=1.5, quality=0.25, penalty=0.125)
    assert sc.score_value(s, 0.0) == 1.5 - 0.125
    assert sc.score_value(s, 2.0) == 1.5 + 0.5 - 0.125
    assert sc.score_value(s, math.inf) == 0.25 - 0.125
    assert sc.score_value(sc.Scored(0, True, 1.5, None), math.inf) == 0.0
    assert sc.sort_key(s, math.inf)[-1] == 1.5 and len(sc.sort_key(s, 1.0)) == 2


# ---- the promise guards ---------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(tens=st.integers(1, 60), offset=st.one_of(st.integers(-3, 3), st.integers(-40, 200)),
       nudge=st.sampled_from([0.0, 0.5, 2.0]))
def test_the_promise_guard_and_the_nudge(tens, offset, nudge):
    """Content drawn around the promise (`offset` from its 10·T tokens), so every boundary
    (the promise, the promise + slack) is crossed."""
    n = 10 * tens
    content = max(0, n + offset)
    slack = n // 4 if n // 4 > 4 else 4
    assert guards.promised_tokens(tens) == n
    assert guards.slack(n) == slack
    assert guards.block_limit(tens) == n + slack
    assert guards.past_promise(content, tens) == (content >= n + slack)
    expected = 0.0 if (nudge == 0 or content < n) else nudge * (content - n + 1) / (slack + 1)
    assert guards.close_bias(content, tens, nudge) == pytest.approx(expected)
    assert guards.close_bias(content, None, nudge) == 0.0


@settings(max_examples=300, deadline=None)
@given(content=st.lists(st.integers(0, 2), max_size=16), times=st.integers(0, 4),
       run=st.integers(1, 4))
def test_the_repetition_guard_counts_overlapping_runs(content, times, run):
    tail = content[-run:]
    count = sum(content[i:i + run] == tail for i in range(len(content) - run + 1))
    expected = times > 0 and len(content) >= run and count >= times
    assert guards.repeating(content, times, run) == expected


# ---- own-answer rules -----------------------------------------------------------------

def answer(ids, ended=True, text=None):
    return {"id": "q", "sample": 0, "ids": ids, "ended": ended,
            "response": text if text is not None else " ".join(map(str, ids))}


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(st.integers(0, 3), max_size=12), ended=st.booleans(),
       blank=st.booleans(), limit=st.sampled_from([0.0, 0.15, 0.5]))
def test_answers_are_dropped_for_the_first_reason_that_holds(ids, ended, blank, limit):
    row = answer(ids, ended, "  " if blank else None)
    grams = [tuple(ids[i:i + 3]) for i in range(len(ids) - 2)]
    share = (sum(g in grams[:i] for i, g in enumerate(grams)) / len(grams)) if grams else 0.0
    expected = ("cut" if not ended else "empty" if not ids or blank else
                "repeating" if share > limit else None)
    assert oa.dropped_before_annotation(row, limit) == expected


def candidate(i, sample, dropped=None, annotated=None, gain=1.0, faithful=True):
    return oa.Candidate(str(i), sample, "r", dropped=dropped, annotated=annotated,
                        promises=1 if annotated else 0, gain=gain, plain_faithful=faithful)


prompt_answers = st.lists(st.lists(st.tuples(
    st.sampled_from([None, None, "cut", "repeating"]), st.booleans(),
    st.sampled_from([1.0, 1.2, 1.3, 1.6]), st.booleans()), min_size=1, max_size=4),
    max_size=7)


@settings(max_examples=300, deadline=None)
@given(draw=prompt_answers, min_gain=st.sampled_from([1.1, 1.3, 1.5]),
       share=st.sampled_from([0.0, 0.4, 0.6]))
def test_the_mix_is_the_oracles(draw, min_gain, share):
    rules = oa.OwnAnswerRules(min_gain=min_gain, plain_share=share)
    by_prompt = [[candidate(p, k, d, "x" if ann else None, g, f)
                  for k, (d, ann, g, f) in enumerate(answers)]
                 for p, answers in enumerate(draw)]
    mix = oa.own_mix(by_prompt, rules)
    parallel, plain_pool = [], []
    for cands in by_prompt:
        ok = [c for c in cands if c.dropped is None]
        if not ok:
            continue
        top = max(c.gain for c in ok)
        best = min((c for c in ok if c.gain == top), key=lambda c: c.sample)
        if best.annotated is not None and best.gain >= min_gain:
            parallel.append(best)
            continue
        plain = sorted((c for c in ok if c.plain_faithful), key=lambda c: c.sample)
        if plain:
            plain_pool.append(plain[0])
    # plain rows are `share` of the whole mix: plain / (parallel + plain) = share
    want = round(len(parallel) * share / (1 - share))
    assert [(c.id, c.sample) for c in mix.parallel] == [(c.id, c.sample) for c in parallel]
    assert mix.plain_offered == len(plain_pool)
    assert [(c.id, c.sample) for c in mix.plain] == [(c.id, c.sample)
                                                      for c in plain_pool[:want]]
    rows = mix.rows({str(p): {"prompt": f"p{p}", "system": None} for p in range(len(draw))})
    assert [r["kind"] for r in rows] == ["parallel"] * len(parallel) + ["plain"] * len(
        mix.plain)
    assert all((r["annotated"] is None) == (r["kind"] == "plain") for r in rows)
    assert all(r["prompt"] == f"p{r['id']}" for r in rows)
    chosen = parallel + plain_pool[:want]
    for r, c in zip(rows, chosen):  # a plain row carries no promise and no gain
        assert (r["promises"], r["gain"]) == ((c.promises, round(c.gain, 4))
                                              if r["kind"] == "parallel" else (0, 1.0))


def test_judge_answer_keeps_an_annotation_only_when_it_strips_back():
    sampled = [5, 6, 7]

    def judge(annotated_content, plain_content, n=2):
        content = {"plain": plain_content, "ann": annotated_content}
        return oa.judge_answer(answer(sampled, text="plain"), oa.OwnAnswerRules(),
                               annotate=lambda text: ("ann", n),
                               training_content=lambda text: content[text],
                               gain_of=lambda text: 1.7)

    c = judge(sampled, sampled)
    assert (c.annotated, c.promises, c.gain, c.plain_faithful, c.dropped) == (
        "ann", 2, 1.7, True, None)
    c = judge([5, 6], sampled)  # the annotation loses a token: the plain row stays
    assert (c.annotated, c.gain, c.dropped) == (None, 1.0, None)
    c = judge([5, 6], [5])  # neither strips back
    assert c.dropped == "unfaithful"
    c = judge(sampled, sampled, n=0)  # no fork pays: a plain answer
    assert c.annotated is None and c.dropped is None


@pytest.mark.parametrize("bad", [dict(plain_share=1.0), dict(plain_share=-0.1),
                                 dict(min_gain=1.0)])
def test_rules_refuse_meaningless_settings(bad):
    with pytest.raises(ValueError):
        oa.OwnAnswerRules(**bad)


# ---- the distill job's bookkeeping ----------------------------------------------------

def write_answers(folder, rows):
    (folder / distill_job.ANSWERS).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_latest_answer_counts_and_only_whole_prompts_are_read(tmp_path):
    from solm.core.records import Record

    records = [Record("a", "pa"), Record("b", "pb")]
    write_answers(tmp_path, [
        {"id": "a", "sample": 0, "ids": [1], "ended": False},
        {"id": "a", "sample": 1, "ids": [2, 3], "ended": True},
        {"id": "a", "sample": 0, "ids": [1, 4], "ended": True, "continued_from": 1},
        {"id": "b", "sample": 0, "ids": [9], "ended": True}])
    got = distill_job.read_answers(tmp_path, records, 2)
    assert list(got) == ["a"]  # b lacks its second sample
    assert [a["ids"] for a in got["a"]] == [[1, 4], [2, 3]]
    assert distill_job.read_answers(tmp_path, records, 1).keys() == {"a", "b"}


@pytest.mark.parametrize("cap,expected", [(3, [("b", 0)]), (2, "refuse"), (5, [("b", 0)])])
def test_cut_answers_continue_below_the_cap_and_a_smaller_cap_is_refused(tmp_path, cap,
                                                                         expected):
    from solm.core.errors import SolmError
    from solm.core.records import Record

    cfg = distill_job.DistillConfig(max_new_tokens=cap, sampled=0)
    records = [Record("a", "pa"), Record("b", "pb"), Record("c", "pc")]
    write_answers(tmp_path, [{"id": "a", "sample": 0, "ids": [1, 2, 3], "ended": True},
                             {"id": "b", "sample": 0, "ids": [1, 2], "ended": False}])
    if expected == "refuse":
        with pytest.raises(SolmError, match="--max-new-tokens"):
            distill_job.cut_answers(tmp_path, records, cfg)
        return
    got = distill_job.cut_answers(tmp_path, records, cfg)
    assert [(r.id, k) for r, k, _ in got] == expected
    assert all(ids == [1, 2] for _, _, ids in got)


def test_build_rows_counts_what_it_judged(tmp_path):
    from solm.core.records import Record

    rng = random.Random(3)
    records = [Record(str(i), f"p{i}") for i in range(6)]
    reasons = [None, "cut", "empty", "repeating", "unfaithful"]
    answers, judged = {}, {}
    for rec in records[:5]:  # the sixth has no answers yet
        answers[rec.id] = [{"id": rec.id, "sample": k} for k in range(3)]
        for k in range(3):
            judged[(rec.id, k)] = candidate(rec.id, k, rng.choice(reasons),
                                            rng.choice([None, "x"]), rng.choice([1.0, 1.5]))
    for k in range(3):  # prompt 0: three equal parallel answers, so the greedy one is chosen
        judged[("0", k)] = candidate("0", k, None, "x", 1.5)
    summary = distill_job.DistillSummary()
    rows = distill_job.build_rows(tmp_path, records, answers,
                                  lambda a: judged[(a["id"], a["sample"])],
                                  oa.OwnAnswerRules(), summary)
    every = list(judged.values())
    assert summary.answers == 15
    for reason in ("cut", "empty", "repeating", "unfaithful"):
        assert summary.dropped[reason] == sum(c.dropped == reason for c in every)
    assert summary.annotated_answers == sum(c.annotated is not None for c in every)
    lines = (tmp_path / distill_job.CANDIDATES).read_text().splitlines()
    assert len(lines) == 15
    assert [json.loads(x) for x in (tmp_path / distill_job.ROWS).read_text().splitlines()] \
        == rows
    assert summary.parallel_rows + summary.plain_rows == len(rows)
    assert summary.chosen_sampled == sum(r["sample"] > 0 for r in rows
                                         if r["kind"] == "parallel")
    assert summary.plain_share == (round(summary.plain_rows / len(rows), 4) if rows else 0.0)


# ---- `--engine auto` --------------------------------------------------------------------

def interp_oracle(points: dict[int, float], k: float) -> float:
    """A pass's ms at k: straight lines between measured ks, the last line carried on."""
    xs = sorted(points)
    if k <= xs[0]:
        return points[xs[0]]
    for a, b in zip(xs, xs[1:]):
        if a <= k <= b:
            return points[a] + (points[b] - points[a]) * (k - a) / (b - a)
    a, b = (xs[-2], xs[-1]) if len(xs) > 1 else (xs[0], xs[0] + 1)
    slope = (points[b] - points[a]) / (b - a) if len(xs) > 1 else 0.0
    return points[xs[-1]] + slope * (k - xs[-1])


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_auto_picks_what_a_brute_force_ranking_picks(data, tmp_path_factory):
    import solm.engines as registry
    from solm.engines.bandwidth import cpu_description
    from solm.decode.pasta.config import PastaDecodeConfig
    from solm.engines import cost

    cache = tmp_path_factory.mktemp("auto")
    names = list(registry.ENGINES)
    able = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    measured = data.draw(st.lists(st.sampled_from(names), unique=True))
    ks = data.draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, unique=True))
    table = {e: {k: data.draw(st.floats(1, 100)) for k in ks} for e in measured}
    content = data.draw(st.sampled_from([0.5, 1.0, 1.4]))
    fed = content * data.draw(st.sampled_from([1.0, 1.5, 3.0]))
    config = PastaDecodeConfig(mode="parallel")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOLM_CACHE", str(cache))
        for name, engine in registry.ENGINES.items():
            mp.setattr(engine, "unavailable", (lambda n: lambda: None if n in able else
                                               "not installed")(name))
            mp.setattr(engine, "refusal", lambda system, **facts: None)
            mp.setattr(engine, "settle", lambda *a, **k: None)
        cost._write(cache / "step_cost.json", {cpu_description(): {"smollm2-135m": {
            "engines": [{"engine": e, "variant": "v", "ms": {str(k): v for k, v in ms.items()}}
                        for e, ms in table.items()]}}})
        cost._write(cache / "tokens_per_pass.json", {"smollm2-135m": {
            "pasta:parallel": {"content": content, "fed": fed}}})
        got = registry.choose("auto", "pasta", config=config, settings=None,
                              model="smollm2-135m")
    rates = {e: content / interp_oracle(table[e], max(1.0, fed))
             for e in names if e in able and e in table}
    if len(rates) >= 2:
        assert rates[got] == max(rates.values())
    else:  # fewer than two measured: the registry's order of the engines that can run it
        assert got == next(e for e in names if e in able)


def test_an_explicit_engine_is_taken_or_refused_in_one_line(monkeypatch):
    import solm.engines as registry
    from solm.core.errors import SolmError

    name = next(iter(registry.ENGINES))
    engine = registry.ENGINES[name]
    monkeypatch.setattr(engine, "unavailable", lambda: None)
    monkeypatch.setattr(engine, "refusal", lambda system, **facts: None)
    assert registry.choose(name, "pasta") == name
    monkeypatch.setattr(engine, "refusal", lambda system, **facts: "cannot here")
    with pytest.raises(SolmError, match=f"--engine {name}: cannot here"):
        registry.choose(name, "pasta")
    monkeypatch.setattr(engine, "unavailable", lambda: "not installed")
    with pytest.raises(SolmError, match="not installed"):
        registry.choose(name, "pasta")
    with pytest.raises(SolmError, match="--engine must be one of"):
        registry.choose("vllm", "pasta")
    for other in registry.ENGINES.values():
        monkeypatch.setattr(other, "unavailable", lambda: "not installed")
    with pytest.raises(SolmError, match="no engine can run this decode"):
        registry.choose("auto", "pasta")


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 60), st.integers(0, 40)),
                     max_size=5))
def test_tokens_per_pass_are_the_rows_sums_over_their_passes(rows, tmp_path_factory):
    from solm.decode.pasta.config import PastaDecodeConfig
    from solm.engines import cost

    cache = tmp_path_factory.mktemp("tpp")
    config = PastaDecodeConfig(mode="parallel")
    records = [{"content_tokens": c, "tokens_fed": f, "forward_passes": p} for c, f, p in rows]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOLM_CACHE", str(cache))
        cost.record_tokens_per_pass("m", "pasta", config, records)
        got = cost.tokens_per_pass("m", "pasta", config)
    counted = [r for r in records if r["forward_passes"]]
    if not counted:
        assert got == (1.0, 1.0)
        return
    passes = sum(r["forward_passes"] for r in counted)
    assert got == (round(sum(r["content_tokens"] for r in counted) / passes, 4),
                   round(sum(r["tokens_fed"] for r in counted) / passes, 4))


# ---- Planned Diffusion's commit rule ----------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_a_denoising_step_commits_what_a_brute_force_ranking_commits(data):
    from solm.decode.pdiff.config import PdiffDecodeConfig
    from solm.decode.pdiff.runtime import slots_to_commit

    n = data.draw(st.integers(1, 8))
    entropy = [data.draw(st.sampled_from([0.1, 0.5, 1.0, 2.0])) for _ in range(n)]
    confidence = [data.draw(st.sampled_from([0.25, 0.5, 0.875, 0.9375])) for _ in range(n)]
    pads = [data.draw(st.booleans()) for _ in range(n)]
    left = data.draw(st.integers(0, 6))
    cfg = PdiffDecodeConfig(order=data.draw(st.sampled_from(["entropy", "confidence"])),
                            defer_pads=data.draw(st.booleans()),
                            pads_end_chunk=data.draw(st.booleans()),
                            confidence_threshold=data.draw(st.sampled_from([None, 0.5, 0.875])))
    got = slots_to_commit(entropy, confidence, pads, left, cfg)

    def rank(i):  # smaller commits first
        pad_last = (pads[i] if cfg.defer_pads else False,)
        by = entropy[i] if cfg.order == "entropy" else -confidence[i]
        return pad_last + (by, i)

    due = n if left <= 1 else -(-n // left)  # ceil(n / steps left)
    expected = set(sorted(range(n), key=rank)[:due])
    if cfg.confidence_threshold is not None:
        expected |= {i for i in range(n) if confidence[i] >= cfg.confidence_threshold
                     and not (cfg.defer_pads and pads[i])}
    if cfg.pads_end_chunk and all(pads):
        expected = set(range(n))
    assert got == expected


# ---- a full finetune kept as its difference (`solm.core.delta_packing`) ----------------

@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10 ** 6), out_dim=st.integers(2, 12), in_dim=st.integers(2, 10),
       rank=st.integers(1, 4), added=st.integers(0, 3), low=st.booleans())
def test_a_packed_difference_unpacks_to_the_base_plus_its_best_rank_r_part(
        seed, out_dim, in_dim, rank, added, low):
    import torch

    from solm.core import delta_packing as dp

    g = torch.Generator().manual_seed(seed)
    base = {"model.embed_tokens.weight": torch.randn(out_dim, in_dim, generator=g),
            "model.layers.0.mlp.up_proj.weight": torch.randn(out_dim, in_dim, generator=g),
            "model.norm.weight": torch.randn(in_dim, generator=g)}
    if low:  # a difference of rank <= `rank`: it must come back (up to int8 rounding)
        diff = torch.randn(out_dim, rank, generator=g) @ torch.randn(rank, in_dim, generator=g)
    else:
        diff = torch.randn(out_dim, in_dim, generator=g)
    new_rows = torch.randn(added, in_dim, generator=g)
    full = {"model.embed_tokens.weight": torch.cat([base["model.embed_tokens.weight"] + diff,
                                                    new_rows]),
            "model.layers.0.mlp.up_proj.weight": base["model.layers.0.mlp.up_proj.weight"]
            + 0.5 * diff,
            "model.norm.weight": base["model.norm.weight"] + 0.25}
    stored = dp.delta_tensors(full, base, rank, rank)
    back = dp.apply_delta(base, stored)
    assert set(back) == set(base)
    # vectors: the difference in bf16
    assert torch.allclose(back["model.norm.weight"], full["model.norm.weight"], atol=2e-2)
    # added rows: whole, in bf16, after the base's rows
    emb = back["model.embed_tokens.weight"]
    assert emb.shape == (out_dim + added, in_dim)
    if added:
        assert torch.allclose(emb[out_dim:], new_rows, atol=3e-2 * (1 + new_rows.abs().max()))
    for name, scale in (("model.embed_tokens.weight", 1.0),
                        ("model.layers.0.mlp.up_proj.weight", 0.5)):
        u, s, vh = torch.linalg.svd(scale * diff, full_matrices=False)
        best = (u[:, :rank] * s[:rank]) @ vh[:rank]  # Eckart-Young: the closest rank-r matrix
        got = back[name][:out_dim] - base[name]
        err = (got - best).abs().max()
        assert err <= 0.05 * (1 + best.abs().max()), (name, float(err))
        if low:
            assert torch.allclose(got, scale * diff, atol=0.05 * (1 + diff.abs().max()))


def test_packing_refuses_what_is_not_a_difference():
    import torch

    from solm.core import delta_packing as dp
    from solm.core.errors import SolmError

    base = {"w": torch.zeros(4, 3), "v": torch.zeros(3)}
    with pytest.raises(SolmError, match="no such weight"):
        dp.delta_tensors({"x": torch.zeros(4, 3)}, base, 1, 1)
    with pytest.raises(SolmError, match="only added rows"):
        dp.delta_tensors({"w": torch.zeros(3, 3)}, base, 1, 1)
    with pytest.raises(SolmError, match="shape"):
        dp.delta_tensors({"v": torch.zeros(4)}, base, 1, 1)
    with pytest.raises(SolmError, match="no entry"):
        dp.apply_delta(base, dp.delta_tensors({"w": torch.ones(4, 3)}, {"w": base["w"]}, 1, 1))


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=12), limit=st.integers(9, 30))
def test_shards_keep_every_tensor_once_in_name_order_under_the_limit(sizes, limit):
    import torch

    from solm.core import delta_packing as dp

    tensors = {f"t{i:02d}": torch.zeros(n, dtype=torch.uint8) for i, n in enumerate(sizes)}
    shards = dp._shards(tensors, limit)
    names = [n for shard in shards for n in shard]
    assert names == sorted(tensors)
    assert all(sum(t.numel() for t in s.values()) <= limit for s in shards)
    # a new shard only starts when the next tensor would not fit the current one
    for a, b in zip(shards, shards[1:]):
        first = next(iter(b.values()))
        assert sum(t.numel() for t in a.values()) + first.numel() > limit


def test_a_packed_difference_replaces_what_its_folder_held(tmp_path):
    """Packing into a folder that holds an older packing leaves only the new shards."""
    import torch

    from solm.core import delta_packing as dp

    base = {"w": torch.zeros(6, 4)}
    out = tmp_path / "kept"
    out.mkdir()
    (out / f"{dp.SHARD_PREFIX}00009.safetensors").write_text("an older packing")
    dp.write_difference({"w": torch.ones(6, 4)}, base, out, rank=1, embed_rank=1,
                        info={"base": "b"})
    assert [p.name for p in dp.shard_files(out)] == [f"{dp.SHARD_PREFIX}00001.safetensors"]
    assert dp.read_info(out)[0]["rank"] == 1


@pytest.mark.parametrize("seed,sampled", [(0, 1), (7, 3)])
def test_answer_k_is_greedy_at_zero_then_sampled_with_seed_plus_k(seed, sampled):
    from types import SimpleNamespace

    from solm.core.sampling import SamplingConfig

    cfg = distill_job.DistillConfig(sampled=sampled, max_new_tokens=33,
                                    greedy=SamplingConfig(temperature=0.0),
                                    sampling=SamplingConfig(temperature=0.7, top_p=0.9))
    runner = distill_job.AnswerRunner(SimpleNamespace(forward=None), cfg, seed)
    assert len(runner.configs) == 1 + sampled
    assert runner.configs[0].sampling.temperature == 0.0
    for k, config in enumerate(runner.configs[1:], 1):
        assert (config.sampling.seed, config.sampling.temperature, config.sampling.top_p) == (
            seed + k, 0.7, 0.9)
    assert all(c.max_new_tokens == 33 and c.mode == "sequential" for c in runner.configs)


def test_a_fresh_distill_summary_counts_nothing():
    summary = distill_job.DistillSummary()
    for name, value in summary.to_dict().items():
        assert value in (0, 0.0, None, {}), (name, value)
