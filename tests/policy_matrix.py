"""The checks every eviction policy must pass (kvpress's default-presses style).

A test module runs them with `from policy_matrix import *`: for every policy in the registry,
or only for the names in its `MATRIX_POLICIES` list. A new policy needs no edit here:
registering it (`@register_policy`) and importing this module is enough. The fixtures
(`tip_tok`, `tip_model`) come from conftest.py.
"""

import random

import torch
from conftest import TIP_REGISTERS as REGISTERS

from solm.core.systems.tip import TipVocab
from solm.decode.tip.policies import POLICIES
from solm.decode.tip.runtime import TipDecodeConfig, TipRequest, TipRuntime

PAGE = 4
BUDGET = 16  # tokens, for the policies that need one: the requests below outgrow it


def pytest_generate_tests(metafunc):
    names = getattr(metafunc.module, "MATRIX_POLICIES", None) or list(POLICIES)
    if "policy_name" in metafunc.fixturenames:
        metafunc.parametrize("policy_name", names)
    if "budget_policy_name" in metafunc.fixturenames:
        metafunc.parametrize("budget_policy_name",
                             [n for n in names if POLICIES[n].needs_budget])


def register_traces(tok, n: int, length: int, seed: int, prompt_len: int = 5
                    ) -> list[TipRequest]:
    """Random token streams with registers reused every few tokens (replayed, not sampled)."""
    vocab = TipVocab.from_tokenizer(tok, REGISTERS)
    regs = sorted(vocab.registers)
    rnd = random.Random(seed)
    out = []
    for rid in range(n):
        prompt = [rnd.randrange(100, 5000) for _ in range(prompt_len + rid % 3)]
        resp = []
        while len(resp) < length:
            resp.append(rnd.choice(regs))
            resp.extend(rnd.randrange(100, 5000) for _ in range(rnd.randint(1, 6)))
        out.append(TipRequest(rid, prompt, forced=resp[:length]))
    return out


def budget_of(name: str) -> int | None:
    return BUDGET if POLICIES[name].needs_budget else None


def test_logits_equal_one_forward_under_what_the_policy_read(tip_model, tip_tok, policy_name):
    """Ragged batch with refills: every decode step's logits equal a single forward pass in
    which each token sees exactly the tokens the policy let it read (and the prompt is
    causal). Exact for any policy, because a token's KV was computed under its own reads."""
    rt = TipRuntime(tip_model, tip_tok, num_pages=64, page_size=PAGE, num_registers=REGISTERS)
    reqs = register_traces(tip_tok, 5, 27, seed=11)
    cfg = TipDecodeConfig(policy=policy_name, budget=budget_of(policy_name), batch_size=2,
                          record_logits=True, record_reads=True, check_reads=True)
    results = {r.rid: r for r in rt.run(reqs, cfg)}
    assert sorted(results) == [r.rid for r in reqs]
    for req in reqs:
        res = results[req.rid]
        assert res.ids == req.forced and len(res.reads) == len(req.forced)
        ids, p = req.prompt + req.forced, len(req.prompt)
        visible = torch.ones(len(ids), len(ids), dtype=torch.bool).tril()
        for j, read in enumerate(res.reads):
            assert p + j in read and max(read) == p + j  # itself, nothing later
            visible[p + j] = False
            visible[p + j, read] = True
        with torch.no_grad():
            ref = tip_model(torch.tensor([ids]), attention_mask=visible[None, None],
                            position_ids=torch.arange(len(ids))[None]).logits[0, p - 1:]
        assert (res.logits - ref).abs().max().item() < 1e-4


def test_pages_return_to_the_pool_over_many_requests(tip_model, tip_tok, policy_name):
    rt = TipRuntime(tip_model, tip_tok, num_pages=96, page_size=PAGE, num_registers=REGISTERS)
    reqs = register_traces(tip_tok, 300, 20, seed=5, prompt_len=3)
    cfg = TipDecodeConfig(policy=policy_name, budget=budget_of(policy_name), batch_size=8,
                          check_reads=True)
    done = sorted(r.rid for r in rt.run(reqs, cfg))
    assert done == list(range(300))
    alloc = rt.allocator
    assert alloc.allocations > 10 * alloc.num_pages  # the same pages served many requests
    assert alloc.in_use == 0 and len(set(alloc.free_list)) == alloc.num_pages
    assert all(o == -1 for o in alloc.owner) and alloc.peak_in_use <= alloc.num_pages


def test_budget_is_kept_and_used(tip_model, tip_tok, budget_policy_name):
    rt = TipRuntime(tip_model, tip_tok, num_pages=128, page_size=PAGE, num_registers=REGISTERS)
    reqs = register_traces(tip_tok, 3, 60, seed=6)
    cfg = TipDecodeConfig(policy=budget_policy_name, budget=BUDGET, batch_size=3,
                          record_reads=True, check_reads=True)
    results = list(rt.run(reqs, cfg))
    reads = [len(r) for res in results for r in res.reads]
    assert max(reads) == BUDGET  # the whole budget is used, never more
    assert all(res.evicted_pages > 0 for res in results)  # pages really went back
