"""Each eviction baseline against its paper's rule, on pages with known tokens and scores
(the policy matrix checks the runtime against the policies; these check the policies against
the rules): which tokens StreamingLLM shows and which pages it frees, which pages H2O keeps,
and that H2O's scores accumulate as attention mass."""

import pytest

from solm.decode.tip.policies import Page, RequestKV, make_policy
from solm.decode.tip.runtime import TipDecodeConfig, TipRequest, TipRuntime


def request(sizes: list[int], scores: list[float] | None = None) -> RequestKV:
    """Pages of the given token counts, tokens numbered in order."""
    req, t = RequestKV(0), 0
    for i, n in enumerate(sizes):
        req.pages.append(Page(i, list(range(t, t + n)), score=(scores or [0] * len(sizes))[i]))
        req.slots += list(range(t, t + n))
        t += n
    return req


def shown(policy, req: RequestKV) -> list[int]:
    return [tok for page, n in policy.visible(req) for tok in page.tokens[:n]]


@pytest.mark.parametrize("page_size,budget", [(8, 28), (8, 40), (16, 100), (4, 12)])
def test_streamingllm_shows_four_sinks_and_the_newest_whole_pages(page_size, budget):
    """StreamingLLM (Xiao et al. 2024): the first 4 tokens (attention sinks) and a window of
    the most recent tokens, here the newest whole pages within budget - 4."""
    policy = make_policy("streamingllm", budget, page_size)
    n_pages = budget // page_size + 4
    req = request([page_size] * n_pages)
    total = page_size * n_pages
    window_pages = max(1, (budget - 4) // page_size)
    expected = list(range(4)) + list(range(total - window_pages * page_size, total))
    assert shown(policy, req) == expected
    assert len(expected) <= budget
    freed = {p.id for p in policy.evict(req)}
    assert freed == set(range(1, n_pages - window_pages))  # the sink page stays allocated
    assert [p.id for p in req.pages] == [0, *range(n_pages - window_pages, n_pages)]
    assert shown(policy, req) == expected  # freeing changed nothing that was shown


def test_streamingllm_shows_everything_until_the_budget_is_passed():
    policy = make_policy("streamingllm", 28, 8)
    req = request([8, 8, 8, 4])  # 28 tokens: at the budget
    assert shown(policy, req) == list(range(28)) and policy.evict(req) == []


def prompted(policy, prompt_len: int, n_tokens: int, page_size: int) -> RequestKV:
    """A request of `n_tokens` in pages of `page_size`, its first `prompt_len` the prompt
    (told to the policy as the runtime tells it)."""
    req = RequestKV(0)
    policy.start(req, None)
    for t in range(n_tokens):
        policy.step_of(req, 0, t < prompt_len)
    for i, start in enumerate(range(0, n_tokens, page_size)):
        req.pages.append(Page(i, list(range(start, min(start + page_size, n_tokens)))))
    req.slots = list(range(n_tokens))
    return req


@pytest.mark.parametrize("page_size,budget,prompt_len,n_tokens", [
    (4, 16, 5, 40), (8, 40, 3, 100), (4, 12, 13, 30), (16, 64, 20, 200), (4, 20, 8, 21),
    (8, 32, 8, 60)])
def test_streaming_prompt_shows_the_whole_prompt_and_the_newest_pages(page_size, budget,
                                                                      prompt_len, n_tokens):
    """Counted in tokens: the prompt rounded up to whole pages, then the newest pages that
    fit in what the budget leaves (two at least), the last one partly filled."""
    policy = make_policy("streaming-prompt", budget, page_size)
    req = prompted(policy, prompt_len, n_tokens, page_size)
    prompt_end = min(n_tokens, -(-prompt_len // page_size) * page_size)
    recent_pages = max(2, budget // page_size - prompt_end // page_size)
    last_page_start = (n_tokens - 1) // page_size * page_size
    window_start = max(prompt_end, last_page_start - (recent_pages - 1) * page_size)
    expected = list(range(prompt_end)) + list(range(window_start, n_tokens))
    assert shown(policy, req) == expected
    freed = policy.evict(req)
    kept = sorted(t for p in req.pages for t in p.tokens)
    assert kept == expected and shown(policy, req) == expected
    assert sorted(t for p in freed for t in p.tokens) == sorted(set(range(n_tokens)) -
                                                                 set(expected))
    if prompt_end + 2 * page_size <= budget:
        assert len(expected) <= budget


def test_streaming_prompt_shows_everything_until_the_budget_is_passed():
    policy = make_policy("streaming-prompt", 16, 4)
    req = prompted(policy, 6, 16, 4)
    assert shown(policy, req) == list(range(16)) and policy.evict(req) == []


def test_h2o_keeps_the_newest_pages_and_the_heaviest_older_ones():
    """H2O (Zhang et al. 2023), by pages: half the budget's pages for the most recent, half
    for the heavy hitters, ranked by accumulated attention per token."""
    policy = make_policy("h2o", 16, 4)  # 4 pages: 2 recent, 2 heavy
    sizes = [4, 4, 4, 2, 4, 4, 4, 4]
    scores = [9.0, 1.0, 7.0, 3.0, 8.0, 2.0, 0.5, 0.1]  # page 3: 1.5 per token, lighter than 2
    req = request(sizes, scores)
    older = range(len(sizes) - 2)
    per_token = {i: scores[i] / sizes[i] for i in older}
    heavy = sorted(older, key=per_token.get, reverse=True)[:2]
    expected = set(heavy) | {6, 7}
    assert expected == {0, 4, 6, 7}  # the case tells the rule from its mirror image
    freed = {p.id for p in policy.evict(req)}
    assert {p.id for p in req.pages} == expected and freed == set(range(8)) - expected


def test_h2o_ranks_per_token_not_per_page():
    policy = make_policy("h2o", 8, 4)  # 2 pages: 1 recent, 1 heavy
    req = request([4, 1, 4], [4.0, 3.0, 1.0])  # page 1: 3.0 on one token beats 1.0 per token
    policy.evict(req)
    assert [p.id for p in req.pages] == [1, 2]


def test_h2o_scores_accumulate_the_attention_mass_of_every_step(tip_model, tip_tok,
                                                                   monkeypatch):
    """Each query row spreads a mass of 1 per head and layer over the keys it reads, so
    after the prompt and k decode steps the scores of a request that lost no page add up to
    layers x heads x (prompt + k)."""
    from solm.decode.tip.policies import H2OPolicy

    totals: list[float] = []
    original = H2OPolicy.evict

    def recording(self, req):
        totals.append(sum(p.score for p in req.pages))
        return original(self, req)

    monkeypatch.setattr(H2OPolicy, "evict", recording)
    rt = TipRuntime(tip_model, tip_tok, num_pages=64, page_size=4, num_registers=4)
    prompt = [5 + i for i in range(10)]
    cfg = TipDecodeConfig(policy="h2o", budget=4 * 64, batch_size=1, max_new_tokens=12)
    list(rt.run([TipRequest(0, prompt)], cfg))
    cfg_model = tip_model.config
    per_row = cfg_model.num_hidden_layers * cfg_model.num_attention_heads
    # evict runs after the prompt and around each step: the distinct totals, in order
    distinct = [t for i, t in enumerate(totals) if i == 0 or abs(t - totals[i - 1]) > 1e-3]
    assert len(distinct) >= 10
    assert distinct == pytest.approx([per_row * (len(prompt) + k)
                                      for k in range(len(distinct))], rel=1e-4)
