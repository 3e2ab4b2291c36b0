"""tip grpo: rollouts from the TIP runtime scored again under TIP's masks give the runtime's own
sampling log-probs; TRL hands rollout_func repeated prompts; the reward's KV term is monotone;
a short end-to-end run logs the share of groups whose correctness varies."""

import contextlib
import copy
import json
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import TIP_REGISTERS
from solm.core.systems.tip import TipVocab
from solm.train.flex import flex_copy as flex_twin
from solm.train.grpo import (TipReward, TipRollouts, completion_logprobs, group_varies,
                             kv_term)


@pytest.fixture(scope="module")
def register_happy_model(tip_tok):
    """A tiny random model whose head favours the register tokens, so rollouts reuse them."""
    from solm.core.models import tiny_model

    model, _ = tiny_model(tip_tok, seed=5)
    old = model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        head.bias[TipVocab.from_tokenizer(tip_tok, TIP_REGISTERS).control_ids] = 6.0
    model.config.tie_word_embeddings = False
    model.lm_head = head
    return model.eval()


def trl_layout(prompt_ids, completion_ids, pad):
    """What GRPOTrainer builds: prompts left-padded, completions right-padded, a 2-D mask."""
    p = max(len(x) for x in prompt_ids)
    c = max(len(x) for x in completion_ids)
    ids, mask = [], []
    for pr, co in zip(prompt_ids, completion_ids):
        ids.append([pad] * (p - len(pr)) + pr + co + [pad] * (c - len(co)))
        mask.append([0] * (p - len(pr)) + [1] * (len(pr) + len(co)) + [0] * (c - len(co)))
    return torch.tensor(ids), torch.tensor(mask), c


@pytest.mark.parametrize("temperature,attention", [(1.0, "sdpa"), (0.7, "sdpa"), (0.7, "flex")])
def test_recomputed_logprobs_equal_the_runtimes_sampling_logprobs(tip_tok, register_happy_model,
                                                                  temperature, attention):
    """Under FlexAttention too: GRPO's scorer then builds a BlockMask (its length
    padded to whole blocks) from the same structure."""
    vocab = TipVocab.from_tokenizer(tip_tok, TIP_REGISTERS)
    rollouts = TipRollouts(tip_tok, TIP_REGISTERS, "tip", page_size=4, batch_size=3,
                           max_completion_length=24, temperature=temperature, top_p=0.95)
    trainer = SimpleNamespace(model=register_happy_model,
                              accelerator=SimpleNamespace(unwrap_model=lambda m: m,
                                                          autocast=contextlib.nullcontext))
    prompts = ["What is 2 + 3?", "Name a prime.", "Hi", "Count to five, please, slowly."] * 2
    out = rollouts(prompts, trainer)
    assert len(out["completion_ids"]) == len(prompts)
    # the KV term reads the response's own live tokens: at step k at most the k response
    # tokens fed so far (mean over S steps at most (S + 1) / 2, the dense figure), never the
    # prompt's (each prompt here is longer than any such mean)
    for kv, completion, p in zip(out["live_response_kv"], out["completion_ids"],
                                 out["prompt_ids"]):
        assert 0 <= kv <= (len(completion) + 1) / 2 < len(p)
    assert sum(out["evicted_pages"]) > 0  # steps were killed while sampling
    assert any(len([t for t in c if t in vocab.registers]) >
               len({t for t in c if t in vocab.registers}) for c in out["completion_ids"])
    ids, mask, keep = trl_layout(out["prompt_ids"], out["completion_ids"], tip_tok.pad_token_id)
    scorer = flex_twin(register_happy_model) if attention == "flex" else register_happy_model
    with torch.no_grad():
        logps, _ = completion_logprobs(scorer, ids, mask, keep, vocab, temperature)
    for i, sampled in enumerate(out["logprobs"]):
        assert len(sampled) == len(out["completion_ids"][i])
        got = logps[i, :len(sampled)]
        assert (got - torch.tensor(sampled)).abs().max() < 1e-4
    # not vacuous: scored under a plain causal mask, the rows with kills differ
    with torch.no_grad():
        causal, _ = completion_logprobs(scorer, ids, mask, keep, vocab, temperature,
                                        tip=False)
    assert (causal - logps)[mask[:, -keep:].bool()].abs().max() > 1e-3


@given(st.lists(st.floats(0, 2000), min_size=2, max_size=20), st.floats(0.01, 2))
def test_the_kv_term_is_monotone_in_live_kv(live, c):
    reward = TipReward(c, max_completion_length=512, num_generations=2)
    ordered = sorted(live)
    r = reward(["p"] * len(ordered), ["\\boxed{3}"] * len(ordered), ["3"] * len(ordered),
               ["math"] * len(ordered), ordered)
    assert all(a >= b for a, b in zip(r, r[1:]))  # more live KV, never more reward
    assert all(0.0 <= kv_term(x, 512) <= 1.0 for x in live)
    assert kv_term(0, 512) == 0 and kv_term(256, 512) == 0.5
    assert reward(["p"], ["\\boxed{3}"], ["3"], ["math"], [10.0])[0] > \
        reward(["p"], ["\\boxed{4}"], ["3"], ["math"], [10.0])[0]


def test_group_varies():
    assert group_varies([1, 0, 0, 0, 1, 1], 2) == [True, False, False]


def test_a_short_run_feeds_rollout_func_repeated_prompts(tmp_path, tiny_folder):
    """TRL's rollout_func gets each prompt already repeated num_generations times (its
    docstring says otherwise): pinned here, with solm.json and the logged groups_varying."""
    from solm.train.grpo import TipGRPOConfig, TipGRPOTrainer

    data = tmp_path / "gsm.jsonl"
    data.write_text("".join(json.dumps({"id": f"gsm8k-{i}", "question": f"What is {i} + 1?",
                                        "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"}) + "\n"
                            for i in range(4)))
    cfg = TipGRPOConfig(data=str(data), model=tiny_folder, out=str(tmp_path / "grpo"),
                        registers=3, batch_size=4, num_generations=2, micro_batch_size=2,
                        max_completion_length=6, max_steps=2, lora_r=4, learning_rate=1e-3,
                        page_size=4, rollout_batch=4, precision="fp32", quiet=True,
                        logging_steps=1)
    trainer = TipGRPOTrainer(cfg)
    meta = trainer.train()
    seen = trainer.rollouts.prompts_seen
    assert len(seen) == 2 and all(len(call) == 4 for call in seen)
    for call in seen:
        assert call[0] == call[1] and call[2] == call[3] and call[0] != call[2]
    assert meta["num_registers"] == 3 and meta["results"]["global_steps"] == 2
    log = [json.loads(x) for x in (tmp_path / "grpo" / "train_log.jsonl").read_text().split("\n")
           if x.strip()]
    assert any("groups_varying" in e for e in log) and any("kv" in e for e in log)
    assert (tmp_path / "grpo" / "rollouts.png").stat().st_size > 1000


def test_the_rollout_curves_are_the_logged_reward_parts_per_step(tmp_path):
    from solm.train.plots import grpo_curves, plot_grpo_curves

    log = tmp_path / "run" / "train_log.jsonl"
    log.parent.mkdir()
    rows = [{"step": 1, "loss": 0.3}, {"step": 1, "correct": 0.5, "kv": 0.2,
                                        "groups_varying": 0.75},
            {"step": 2, "eval_loss": 0.1}, {"step": 2, "correct": 0.25, "kv": 0.1,
                                            "groups_varying": 0.5}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3, "corr')
    assert grpo_curves(log) == {"correct": [(1, 0.5), (2, 0.25)], "kv": [(1, 0.2), (2, 0.1)],
                                "groups_varying": [(1, 0.75), (2, 0.5)]}
    assert plot_grpo_curves(log, tmp_path / "run" / "rollouts.png")
    sft_log = tmp_path / "sft_log.jsonl"
    sft_log.write_text(json.dumps(rows[0]) + "\n")
    assert grpo_curves(sft_log) == {}
    assert not plot_grpo_curves(sft_log, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_bf16_rollouts_match_the_bf16_recompute(tip_tok, register_happy_model):
    """Under --precision bf16 the rollouts sample in the trainer's autocast, so the
    sampler's log-probs and the trainer's recomputed ones are both bf16 and agree within what
    bf16 kernels allow (different kernels, different summation orders): measured max
    |difference| 1.95e-3 on this tiny model (Intel Xeon with AMX, 2 cores), against 1.16e-2
    between an fp32 rollout and the bf16 recompute, the mismatch this removes; the test asks
    for a third of the latter."""
    vocab = TipVocab.from_tokenizer(tip_tok, TIP_REGISTERS)

    def bf16():
        return torch.autocast("cpu", dtype=torch.bfloat16)

    rollouts = TipRollouts(tip_tok, TIP_REGISTERS, "tip", page_size=4, batch_size=3,
                           max_completion_length=24, temperature=1.0, top_p=1.0)
    trainer = SimpleNamespace(model=register_happy_model,
                              accelerator=SimpleNamespace(unwrap_model=lambda m: m,
                                                          autocast=bf16))
    prompts = ["What is 2 + 3?", "Name a prime.", "Hi", "Count to five, please, slowly."]
    out = rollouts(prompts, trainer)
    ids, mask, keep = trl_layout(out["prompt_ids"], out["completion_ids"], tip_tok.pad_token_id)
    with torch.no_grad(), bf16():
        recomputed, _ = completion_logprobs(register_happy_model, ids, mask, keep, vocab, 1.0)
    with torch.no_grad():
        fp32, _ = completion_logprobs(register_happy_model, ids, mask, keep, vocab, 1.0)
    worst, from_fp32 = 0.0, 0.0
    for i, sampled in enumerate(out["logprobs"]):
        sampled = torch.tensor(sampled)
        worst = max(worst, (recomputed[i, :len(sampled)].float() - sampled).abs().max().item())
        from_fp32 = max(from_fp32, (fp32[i, :len(sampled)] - sampled).abs().max().item())
    # what an fp32 rollout scored in bf16 would differ by (the old mismatch)
    before = (fp32 - recomputed.float())[mask[:, -keep:].bool()].abs().max().item()
    assert worst < before / 3
    assert from_fp32 > 1e-5  # the rollout really ran in bf16, not in the fp32 weights


def test_two_processes_sample_what_one_process_does(tip_tok, register_happy_model):
    """A rollout is seeded by its prompt's place in the global generation batch (TRL
    gives process k the k-th contiguous slice), so the completions of two processes, each
    given its half, are those one process samples for the whole batch."""
    prompts = ["What is 2 + 3?", "Name a prime.", "Hi", "Count to five, please, slowly."]

    def sample(part, process_index):
        rollouts = TipRollouts(tip_tok, TIP_REGISTERS, "tip", page_size=4, batch_size=2,
                               max_completion_length=16, temperature=1.0, top_p=1.0)
        trainer = SimpleNamespace(model=register_happy_model, accelerator=SimpleNamespace(
            unwrap_model=lambda m: m, autocast=contextlib.nullcontext,
            process_index=process_index))
        return rollouts(part, trainer)["completion_ids"]

    whole = sample(prompts, 0)
    assert sample(prompts[:2], 0) + sample(prompts[2:], 1) == whole
    # not vacuous: seeded by the local index, process 1 would sample otherwise
    assert sample(prompts[2:], 0) != whole[2:]


def test_rollouts_of_one_token_steps_fit_the_pool(tip_tok, register_happy_model):
    """Every token a register (one-token steps, each on a fresh page): the rollout pool must
    still hold the batch. Its peak per request, counted by hand: the prompt's pages, plus one
    page per live step (four held registers and the step a reuse kills, freed right after the
    new step's page is taken) and the new one; the old sizing (tokens / page size + 2) ran out."""
    from solm.decode.tip.runtime import worst_case_pages

    model = copy.deepcopy(register_happy_model)
    with torch.no_grad():
        model.lm_head.bias[TipVocab.from_tokenizer(tip_tok, TIP_REGISTERS).control_ids] = 60.0
    rollouts = TipRollouts(tip_tok, TIP_REGISTERS, "tip", page_size=4, batch_size=4,
                           max_completion_length=8, temperature=1.0, top_p=1.0)
    trainer = SimpleNamespace(model=model, accelerator=SimpleNamespace(
        unwrap_model=lambda m: m, autocast=contextlib.nullcontext, process_index=0))
    prompts = ["What is 2 + 3?"] * 8
    out = rollouts(prompts, trainer)
    vocab = TipVocab.from_tokenizer(tip_tok, TIP_REGISTERS)
    assert all(len(c) == 8 and set(c) <= set(vocab.control_ids) for c in out["completion_ids"])
    for p in out["prompt_ids"]:
        by_hand = -(-len(p) // 4) + TIP_REGISTERS + 2
        assert worst_case_pages(len(p), 8, 4, TIP_REGISTERS, True) >= by_hand


def test_a_resumed_run_draws_the_rollout_seeds_and_prompt_order_of_an_unbroken_one():
    """Seeds come from the optimizer step (a resumed run's rollouts object is new, its call
    counter at 0), and each epoch's prompt order from seed + epoch: written here as
    torch.randperm under that seed, TRL's RepeatSampler layout (each prompt repeated per
    generation)."""
    from trl.trainer.utils import RepeatSampler

    from solm.train.grpo import epoch_seeded

    def at(step):
        return SimpleNamespace(state=SimpleNamespace(global_step=step))

    unbroken = TipRollouts(None, 4, "tip", 4, 4, 8, 1.0, 1.0, seed=3)
    seeds = [unbroken.draw_seed(at(s)) for s in (0, 1, 2, 2, 3)]
    assert len(set(seeds)) == 5  # two draws at one step differ too
    resumed = TipRollouts(None, 4, "tip", 4, 4, 8, 1.0, 1.0, seed=3)
    assert [resumed.draw_seed(at(s)) for s in (2, 2, 3)] == seeds[2:]

    def sampler():
        return epoch_seeded(RepeatSampler(list(range(6)), mini_repeat_count=2, batch_size=3,
                                          seed=11))

    def by_hand(epoch):
        order = torch.randperm(6, generator=torch.Generator().manual_seed(11 + epoch)).tolist()
        return [i for i in order for _ in range(2)]

    first = sampler()
    orders = []
    for epoch in range(3):
        first.set_epoch(epoch)
        orders.append(list(first))
    assert orders == [by_hand(e) for e in range(3)]
    again = sampler()  # resumed in epoch 2
    again.set_epoch(2)
    assert list(again) == orders[2]


@pytest.mark.parametrize("seed", range(5))
def test_the_logged_share_of_varying_groups_is_a_recount_of_the_groups(seed):
    """The reward's log, recounted from its own rollouts: a group varies when some but not
    all of its completions are right (0 < right < group); `correct` the share right; the
    reward each rollout gets is its correctness minus c times its KV term."""
    import random as _random
    from collections import defaultdict

    rnd = _random.Random(seed)
    group = rnd.choice([2, 3, 4])
    n = group * rnd.randint(1, 6)
    right = [rnd.random() < 0.5 for _ in range(n)]
    gold = [str(rnd.randrange(10)) for _ in range(n)]
    completions = [f"so \\boxed{{{g if r else (int(g) + 1) % 10}}}"
                   for g, r in zip(gold, right)]
    kv = [rnd.uniform(0, 300) for _ in range(n)]
    reward = TipReward(kv_penalty=0.3, max_completion_length=200, num_generations=group)
    reward.trainer = type("T", (), {"_metrics": {"train": defaultdict(list)}})()
    got = reward(["p"] * n, completions, gold=gold, kind=["integer"] * n, live_response_kv=kv)
    groups = [right[i:i + group] for i in range(0, n, group)]
    varying = sum(0 < sum(g) < len(g) for g in groups) / len(groups)
    metrics = reward.trainer._metrics["train"]
    assert metrics["groups_varying"] == [pytest.approx(varying)]
    assert metrics["correct"] == [pytest.approx(sum(right) / n)]
    assert got == pytest.approx([float(r) - 0.3 * min(1.0, k / 200) for r, k in zip(right, kv)])
