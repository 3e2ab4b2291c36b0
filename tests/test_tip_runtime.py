"""Paged TIP runtime: logits equal the training forward, pages are freed, reused, never read
after freeing, and the heuristic policies keep their budgets."""

import pytest
import torch

from conftest import TIP_REGISTERS as REGISTERS
from policy_matrix import register_traces

from solm.core.systems.tip import TipVocab
from solm.train.collator import collate_examples
from solm.core.systems.tip import structure as tip_structure
from solm.decode.tip.runtime import TipDecodeConfig, TipRequest, TipRuntime


def full_forward(model, ids, visible=None):
    with torch.no_grad():
        kw = {}
        if visible is not None:
            kw = dict(attention_mask=visible[None, None],
                      position_ids=torch.arange(len(ids))[None])
        return model(torch.tensor([ids]), **kw).logits[0]


@pytest.mark.parametrize("policy,budget", [("dense", None), ("tip", None), ("h2o", 64),
                                           ("streamingllm", 64)])
def test_paged_logits_equal_one_forward_pass(tip_model, tip_tok, policy, budget):
    """Rows of different lengths in one batch (ragged reads), refills, GQA (2 query heads per
    KV head). h2o / streamingllm with a budget above every request's length evict nothing,
    so they must match the plain forward too: that checks the scoring kernel H2O runs."""
    rt = TipRuntime(tip_model, tip_tok, num_pages=64, page_size=4, num_registers=REGISTERS)
    reqs = register_traces(tip_tok, 5, 23, seed=1)
    cfg = TipDecodeConfig(policy=policy, budget=budget, batch_size=2,
                          record_logits=True, check_reads=True)
    results = {r.rid: r for r in rt.run(reqs, cfg)}
    assert sorted(results) == [0, 1, 2, 3, 4]
    vocab = TipVocab.from_tokenizer(tip_tok, REGISTERS)
    for req in reqs:
        res = results[req.rid]
        assert res.ids == req.forced
        ids = req.prompt + req.forced
        visible = tip_structure(ids, vocab, len(req.prompt)).visible if policy == "tip" else None
        ref = full_forward(tip_model, ids, visible)[len(req.prompt) - 1:]
        assert res.logits.shape == ref.shape
        assert (res.logits - ref).abs().max().item() < 1e-4
    if policy == "tip":  # eviction really happened: fewer live tokens than dense would read
        assert all(r.mean_live_tokens < len(reqs[r.rid].prompt) + 23 / 2 + 2
                   for r in results.values())


def test_tip_eviction_changes_logits(tip_model, tip_tok):
    """The structure mask matters: with TIP eviction the logits differ from dense."""
    rt = TipRuntime(tip_model, tip_tok, num_pages=64, page_size=4, num_registers=REGISTERS)
    req = register_traces(tip_tok, 1, 30, seed=3)
    runs = {p: next(iter(rt.run(req, TipDecodeConfig(policy=p,
                                                      record_logits=True))))
            for p in ("dense", "tip")}
    assert (runs["dense"].logits - runs["tip"].logits).abs().max() > 1e-3
    assert runs["tip"].mean_live_tokens < runs["dense"].mean_live_tokens


def test_the_read_check_catches_a_read_of_a_freed_page():
    """The instrumentation the other tests run under can fail: a read of a freed page."""
    from solm.engines.torch.paged import PageAllocator, PagedState

    st = PagedState(num_pages=4, page_size=4)
    st.allocator = PageAllocator(4)
    a, b = st.allocator.alloc(owner=7), st.allocator.alloc(owner=7)
    st.set_reads([torch.tensor([a * 4, a * 4 + 1, b * 4])])
    st.read_owner = torch.tensor([7])
    st.assert_reads_owned()
    st.allocator.free(a)
    with pytest.raises(AssertionError, match="owned by -1"):
        st.assert_reads_owned()
    while st.allocator.free_list:  # the freed page goes to another request
        st.allocator.alloc(owner=8)
    with pytest.raises(AssertionError, match="owned by 8"):
        st.assert_reads_owned()


@pytest.mark.slow
def test_pages_are_reused_and_nothing_leaks_over_1000_requests(tip_model, tip_tok):
    rt = TipRuntime(tip_model, tip_tok, num_pages=96, page_size=4, num_registers=REGISTERS)
    reqs = register_traces(tip_tok, 1000, 9, seed=5, prompt_len=3)
    cfg = TipDecodeConfig(policy="tip", batch_size=16, check_reads=True)
    done_results = list(rt.run(reqs, cfg))
    done = [r.rid for r in done_results]
    assert sorted(done) == list(range(1000))
    assert sum(r.evicted_pages for r in done_results) > 200  # reused registers freed pages
    alloc = rt.allocator
    assert alloc.allocations > 10 * alloc.num_pages  # the same pages served many requests
    assert alloc.in_use == 0 and len(set(alloc.free_list)) == alloc.num_pages
    assert all(o == -1 for o in alloc.owner)
    assert alloc.peak_in_use <= alloc.num_pages


@pytest.mark.parametrize("policy", ["streamingllm", "h2o"])
def test_heuristic_policies_keep_their_budget(tip_model, tip_tok, policy):
    page, budget = 4, 16
    rt = TipRuntime(tip_model, tip_tok, num_pages=128, page_size=page, num_registers=REGISTERS)
    reqs = register_traces(tip_tok, 3, 60, seed=6)
    cfg = TipDecodeConfig(policy=policy, budget=budget, batch_size=3,
                          check_reads=True)
    seen = []
    original = rt._forward

    def spy(rows, tokens, slots, positions, pol, prefill_causal=False):
        if not prefill_causal:
            seen.extend((r.kv.n_tokens, sum(n for _, n in pol.visible(r.kv)), len(r.kv.pages))
                        for r in rows)
        return original(rows, tokens, slots, positions, pol, prefill_causal)

    rt._forward = spy
    results = list(rt.run(reqs, cfg))
    assert len(results) == 3
    over = [(n, vis, pages) for n, vis, pages in seen if n > budget]
    assert over and all(vis <= budget for _, vis, _ in seen)
    assert max(vis for _, vis, _ in over) == budget  # the whole budget is used
    assert all(vis >= budget - page for _, vis, _ in over)
    extra_sink_page = 1 if policy == "streamingllm" else 0
    assert all(p <= budget // page + extra_sink_page for _, _, p in over)
    assert max(r.peak_live_tokens for r in results) == budget


def test_generation_samples_and_stops(tip_model, tip_tok):
    rt = TipRuntime(tip_model, tip_tok, num_pages=64, page_size=8, num_registers=REGISTERS)
    reqs = [TipRequest(i, [200, 300, 400], seed=i) for i in range(4)]
    cfg = TipDecodeConfig(policy="tip", batch_size=2, max_new_tokens=12)
    from solm.core.sampling import SamplingConfig
    cfg.sampling = SamplingConfig(temperature=1.0, top_p=0.95, seed=7)
    results = sorted(rt.run(reqs, cfg), key=lambda r: r.rid)
    assert all(r.generated == 12 and r.flags == ["max_new_tokens"] for r in results)
    assert len({tuple(r.ids) for r in results}) > 1  # per-sample seeds differ
    again = sorted(rt.run(reqs, cfg), key=lambda r: r.rid)
    assert [r.ids for r in again] == [r.ids for r in results]  # seeded
    assert rt.allocator.in_use == 0


def test_tip_reads_exactly_what_the_oracle_shows(tip_model, tip_tok):
    """Each decode step reads the tokens the spec (tests/oracles.py) keeps alive, no more,
    and exactly what `tip sft`'s training batch lets that token see: TIP's training mask
    equals the runtime's visibility at every token, killed steps included."""
    from oracles import tip_oracle

    from solm.train.tip_sft import TipCollator

    rt = TipRuntime(tip_model, tip_tok, num_pages=64, page_size=4, num_registers=REGISTERS)
    reqs = register_traces(tip_tok, 4, 40, seed=9)
    cfg = TipDecodeConfig(policy="tip", batch_size=2, record_reads=True, check_reads=True)
    vocab = TipVocab.from_tokenizer(tip_tok, REGISTERS)
    collator = TipCollator(tip_tok, vocab, max_len=4096)
    for res in rt.run(reqs, cfg):
        req = reqs[res.rid]
        p = len(req.prompt)
        visible, _, _ = tip_oracle(req.prompt + req.forced, tip_tok, p)
        batch = collate_examples([collator.encode_ids(req.prompt, req.forced)], 0)
        trained = batch["attention_mask"][0, 0]
        killed_seen = False
        for j, read in enumerate(res.reads):
            assert sorted(read) == visible[p + j].nonzero().flatten().tolist()
            train_row = trained[p + j, :p + j + 1].nonzero().flatten().tolist()
            assert sorted(read) == train_row
            killed_seen |= len(train_row) < p + j + 1
        assert res.evicted_pages > 0 and killed_seen


def _streaming_live_response(j: int, prompt: int, page: int, budget: int, sinks: int = 4):
    """Response tokens StreamingLLM lets the step that feeds token j read, worked out by
    hand: all tokens while the request fits the budget; after that the 4 sink tokens (the
    prompt's) and the newest (budget - 4) // page whole pages after the first."""
    n = j + 1
    if n <= budget:
        return n - prompt
    recent = (budget - sinks) // page
    newest = j // page
    kept = [t for q in range(max(1, newest - recent + 1), newest + 1)
            for t in range(q * page, min((q + 1) * page, n))]
    return sum(t >= prompt for t in kept)


@pytest.mark.parametrize("policy,budget", [("dense", None), ("streamingllm", 12)])
def test_live_response_kv_counts_the_response_tokens_read(tip_model, tip_tok, policy, budget):
    """The response's live KV was the mean live tokens minus the prompt, which
    reads 0 once a budget has evicted the prompt. Against the hand-worked reads: dense reads
    the k response tokens fed so far at step k (mean (S + 1) / 2); StreamingLLM the newest
    pages' response tokens."""
    rt = TipRuntime(tip_model, tip_tok, num_pages=64, page_size=4, num_registers=REGISTERS)
    prompt, response = list(range(5, 13)), list(range(20, 40))
    res = next(iter(rt.run([TipRequest(0, prompt, forced=response)],
                           TipDecodeConfig(policy=policy, budget=budget, record_reads=True))))
    steps = len(res.reads)
    assert steps >= len(response) - 1
    if policy == "dense":
        expected = [k for k in range(1, steps + 1)]
    else:
        expected = [_streaming_live_response(len(prompt) + s, len(prompt), 4, budget)
                    for s in range(steps)]
        assert max(expected) < len(response) and min(expected[-5:]) > 0
    assert res.mean_live_response_tokens == pytest.approx(sum(expected) / steps)
    if policy == "streamingllm":  # what the old figure said: nothing live
        assert max(0.0, res.mean_live_tokens - len(prompt)) < res.mean_live_response_tokens
