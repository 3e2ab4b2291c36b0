"""Continuous batching (fp32, tiny models): every request's logits equal its solo decode while
requests of different lengths join and leave mid-decode, in parallel and sequential mode;
greedy outputs equal; N samples sharing a prompt equal N solo decodes; cancelled and ended
requests free their slots; a request that can never fit is refused and the others finish."""

import random

import pytest
import torch

from solm.core.chat import text_ids
from solm.core.sampling import SamplingConfig
from solm.decode.pasta.batched import (CANCELLED, REFUSED, BatchedPastaRuntime, BatchRequest)
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime, replay_scripts
from solm.engines.torch.slots import SlotAllocator

ANSWERS = [
    'Tips:\n1.<promise topic="sleep" tokens="2"/><async> Sleep eight hours every night and '
    'keep a regular schedule.</async>\n2.<promise topic="food" tokens="1"/><async> Eat '
    'greens.</async><sync/> Done.',
    'Two:\n-<promise topic="a" tokens="1"/><async> Apples.</async>\n-<promise topic="b" '
    'tokens="1"/><async> Bananas and pears.</async><sync/>',
    "A plain answer with no structure at all, just words in a row.",
    'One:<promise topic="x" tokens="3"/><async> a longer block that runs on for a while, '
    'longer than the main thread.</async> and main goes on meanwhile<sync/> End.',
]
PROMPTS = ["Give me tips.", "Name two fruits, please, in a list.", "Say something.",
           "One thing with a long explanation?"]


def replay_request(rt_vocab, tok, i, prompt, answer, mode="parallel"):
    resp = text_ids(tok, answer)
    if mode == "parallel":
        streams, anchors = replay_scripts(resp, rt_vocab)
    else:
        streams, anchors = {0: resp}, set()
    cfg = PastaDecodeConfig(mode=mode, record_logits=True, max_new_tokens=len(resp) + 1,
                            max_fork_tokens=len(resp) + 1)
    return BatchRequest(i, text_ids(tok, prompt), cfg, scripts=streams,
                        replay_anchors=frozenset(anchors))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_each_requests_logits_equal_its_solo_decode(tiny, pasta_tokenizer, vocab, mode,
                                                    compiled):
    """Four answers of different lengths, two at a time: requests 3 and 4 join as 1 and 2
    leave, mid-decode of the others. Compiled: the step traced by dynamo with the eager
    backend (this checks padding and the opaque attention op, not inductor)."""
    solo = PastaRuntime(tiny, pasta_tokenizer, pool_size=1024)
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=1024, max_batch=2,
                                  compile=compiled, compile_backend="eager")
    reqs = [replay_request(vocab, pasta_tokenizer, i, p, a, mode)
            for i, (p, a) in enumerate(zip(PROMPTS, ANSWERS))]
    order = []
    for r in batched.run(reqs):
        order.append(r.rid)
        alone = solo.replay(text_ids(pasta_tokenizer, PROMPTS[r.rid]),
                            text_ids(pasta_tokenizer, ANSWERS[r.rid]), mode=mode,
                            record_logits=True)
        assert r.result.ids == alone.ids
        assert r.result.forward_passes == alone.forward_passes
        assert r.result.threads == alone.threads
        assert (r.result.logits - alone.logits).abs().max().item() < 1e-4
    assert sorted(order) == [0, 1, 2, 3]
    assert batched.free_slots == 1024
    if compiled:  # a graph per token width used (1 alone, 8 for 2-6 tokens), none per length
        assert batched.forward.compiled.compiles == 2
    assert batched.steps < sum(solo.replay(text_ids(pasta_tokenizer, p), text_ids(
        pasta_tokenizer, a), mode=mode).forward_passes for p, a in zip(PROMPTS, ANSWERS))


def test_greedy_outputs_equal_solo_decoding(tiny, pasta_tokenizer):
    solo = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=2048, max_batch=3)
    prompts = [text_ids(pasta_tokenizer, p) for p in PROMPTS + ["Hi", "What is two plus two?"]]
    for mode in ("parallel", "sequential"):
        cfgs = [PastaDecodeConfig(mode=mode, max_new_tokens=n) for n in (5, 17, 9, 30, 2, 12)]
        reqs = [BatchRequest(i, p, c) for i, (p, c) in enumerate(zip(prompts, cfgs))]
        got = {r.rid: r.result for r in batched.run(reqs)}
        for i, (p, c) in enumerate(zip(prompts, cfgs)):
            alone = solo.generate(p, c)
            assert got[i].ids == alone.ids and got[i].flags == alone.flags, (mode, i)
    assert batched.free_slots == 2048


def test_per_request_settings_in_one_batch(tiny, pasta_tokenizer):
    """Temperatures, seeds, caps and modes differ within one batch; each request gets what
    its own settings give alone."""
    solo = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=2048, max_batch=8)
    prompt = text_ids(pasta_tokenizer, "Tell me a story.")
    cfgs = [PastaDecodeConfig(mode=m, max_new_tokens=n, sampling=SamplingConfig(
        temperature=t, top_p=p, seed=s, repetition_penalty=rp))
        for m, n, t, p, s, rp in [("parallel", 12, 1.0, 0.9, 1, 1.0),
                                  ("sequential", 7, 0.7, 1.0, 2, 1.3),
                                  ("parallel", 20, 0.0, 1.0, 0, 1.2),
                                  ("sequential", 15, 1.5, 0.5, 9, 1.0)]]
    got = {r.rid: r.result.ids for r in batched.run(
        BatchRequest(i, prompt, c) for i, c in enumerate(cfgs))}
    for i, c in enumerate(cfgs):
        assert got[i] == solo.generate(prompt, c).ids, i


def test_samples_sharing_a_prompt_equal_solo_decodes_with_the_same_seeds(tiny, pasta_tokenizer):
    solo = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=1024, max_batch=4)
    prompt = text_ids(pasta_tokenizer, "Write three tips for learning a language.")
    cfg = PastaDecodeConfig(max_new_tokens=16, record_logits=True,
                            sampling=SamplingConfig(temperature=1.0, seed=5))
    samples = batched.sample(prompt, cfg, n=6, seeds=[5, 6, 7, 8, 9, 10])
    from dataclasses import replace
    for k, s in enumerate(samples):
        alone = solo.generate(prompt, replace(cfg, sampling=replace(cfg.sampling, seed=5 + k)))
        assert s.ids == alone.ids
        assert (s.logits - alone.logits).abs().max().item() < 1e-4
    assert len({tuple(s.ids) for s in samples}) > 1  # the seeds differ: so do the samples
    assert batched.free_slots == 1024  # the shared prompt went with its last sample


def test_a_cancelled_request_frees_its_slots(tiny, pasta_tokenizer):
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=60)
    full = {r.rid: r for r in BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=512).run(
        BatchRequest(i, [5, 6, 7 + i], cfg) for i in range(3))}
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=512, max_batch=4)
    held = []
    base = batched.chooser(cfg)

    def cancels_request_1_after_ten_tokens(thread, logits, state):
        if len(thread.fed) == 10:
            held.append(512 - batched.free_slots)
            batched.cancel(1)
        return base(thread, logits, state)

    reqs = [BatchRequest(i, [5, 6, 7 + i], cfg) for i in range(4)]
    reqs[0].chooser = cancels_request_1_after_ten_tokens
    batched.cancel(3)  # still waiting: never admitted
    out = {r.rid: r for r in batched.run(reqs)}
    assert out[3].result.flags == [CANCELLED] and out[3].result.ids == []
    assert CANCELLED in out[1].result.flags and 0 < len(out[1].result.ids) < 60
    assert held == [3 * (3 + 60)]  # three requests held their reservations
    assert out[0].result.ids == full[0].result.ids and out[2].result.ids == full[2].result.ids
    assert batched.free_slots == 512


@pytest.mark.slow
def test_a_thousand_requests_through_a_small_pool_leave_it_empty(tiny, pasta_tokenizer):
    rng = random.Random(0)
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=160, max_batch=6)
    reqs = [BatchRequest(i, [rng.randrange(5, 900) for _ in range(rng.randint(1, 12))],
                         PastaDecodeConfig(mode=rng.choice(["parallel", "sequential"]),
                                           max_new_tokens=rng.randint(1, 24)),
                         group=rng.choice([None, "g1", "g2"]))
            for i in range(1000)]
    seen = [r.rid for r in batched.run(reqs)]
    assert sorted(seen) == list(range(1000))
    assert batched.free_slots == 160 and batched.slots.free_ranges == [(0, 160)]
    assert (batched.forward.attrs["request"] == -1).all()


def test_a_request_larger_than_the_pool_is_refused_and_the_others_finish(tiny,
                                                                          pasta_tokenizer):
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=64, max_batch=4)
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=8)
    reqs = [BatchRequest(0, [5] * 10, cfg), BatchRequest(1, [5] * 60, cfg),
            BatchRequest(2, [6] * 10, cfg)]
    out = {r.rid: r for r in batched.run(reqs)}
    assert out[1].result.flags == [REFUSED] and "does not fit a pool of 64" in out[1].error
    assert len(out[0].result.ids) == 8 and len(out[2].result.ids) == 8
    assert out[0].error is None and batched.free_slots == 64
    # a request that needs exactly the pool (prompt + max_new_tokens = 64 slots) fits
    exact = next(iter(batched.run([BatchRequest(3, [5] * 56, cfg)])))
    assert exact.error is None and len(exact.result.ids) == 8


def test_the_slot_allocator_against_a_set_of_free_slots():
    """First fit and merging, checked against the plain set of free slot numbers."""
    rng = random.Random(1)
    alloc, free, taken = SlotAllocator(100), set(range(100)), []
    for _ in range(2000):
        if taken and rng.random() < 0.5:
            start, end = taken.pop(rng.randrange(len(taken)))
            alloc.free(start, end)
            free |= set(range(start, end))
        else:
            n = rng.randint(1, 20)
            got = alloc.take(n)
            runs = [s for s in sorted(free) if all(x in free for x in range(s, s + n))]
            if got is None:
                assert not runs
            else:
                assert got == (runs[0], runs[0] + n) and set(range(*got)) <= free
                free -= set(range(*got))
                taken.append(got)
        assert alloc.free_slots == len(free)
    with pytest.raises(ValueError):
        alloc.free(0, 101)


def test_a_shared_prompt_is_invisible_to_other_groups(tiny, pasta_tokenizer):
    """Two groups with the same prompt text: each writes its own copy; a request never reads
    another group's prompt (its logits equal a solo decode either way)."""
    solo = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=512, max_batch=4)
    prompt = [5, 6, 7, 8]
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=6, record_logits=True)
    reqs = [BatchRequest(i, prompt, cfg, group=g) for i, g in enumerate(["a", "b", "a", "b"])]
    alone = solo.generate(prompt, cfg)
    for r in batched.run(reqs):
        assert r.result.ids == alone.ids
        torch.testing.assert_close(r.result.logits, alone.logits, atol=1e-4, rtol=1e-4)


def test_pasta_decode_batched_writes_what_one_at_a_time_writes(tmp_path, tiny_folder):
    import json

    from typer.testing import CliRunner

    from solm.cli import pasta

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": p}) + "\n"
                               for i, p in enumerate(PROMPTS * 2)))
    rows = {}
    for batch in (1, 3):
        out = tmp_path / f"out{batch}.jsonl"
        r = CliRunner().invoke(pasta.app, ["decode", "-p", str(prompts), "-o", str(out), "-m",
                                           tiny_folder, "--max-new-tokens", "12",
                                           "--batch-size", str(batch), "--no-compile", "-q"])
        assert r.exit_code == 0, r.output
        rows[batch] = {x["id"]: x for x in map(json.loads, out.read_text().splitlines())}
        manifest = json.loads((tmp_path / f"out{batch}.jsonl.manifest.json").read_text())
        assert manifest["speed"]["batch_size"] == batch
    assert set(rows[1]) == set(rows[3]) == {f"q{i}" for i in range(8)}
    for rid in rows[1]:
        for key in ("response", "annotated", "content_tokens", "forward_passes", "flags"):
            assert rows[1][rid][key] == rows[3][rid][key], (rid, key)


def test_eval_run_batch_size_gives_the_outputs_of_one_at_a_time(tmp_path, tiny_folder):
    """A quality run in batches: the same outputs as the timed run, rows untimed, and the
    summary leaves the realized speedup out instead of inventing one."""
    import json

    from typer.testing import CliRunner

    from solm.cli import pasta_eval

    prompts = tmp_path / "alpaca.jsonl"
    prompts.write_text("".join(json.dumps({"instruction": p}) + "\n" for p in PROMPTS))
    outs = {}
    for batch in (1, 3):
        run_dir = tmp_path / f"run{batch}"
        r = CliRunner().invoke(pasta_eval.app, [
            "run", "-o", str(run_dir), "--prompts", str(prompts),
            "--method", f"sequential={tiny_folder}", "--method", f"apar={tiny_folder}",
            "--method", f"sot={tiny_folder}", "--sot-skeleton-tokens", "8",
            "--no-judge", "--max-new-tokens", "10", "--dtype", "fp32", "--no-compile",
            "--batch-size", str(batch), "-q"])
        assert r.exit_code == 0, r.output
        outs[batch] = {label: {x["id"]: x for x in map(json.loads, (
            run_dir / "outputs" / f"{label}.jsonl").read_text().splitlines())}
            for label in ("sequential", "apar", "sot")}
        summary = json.loads((run_dir / "summary.json").read_text())
        realized = summary["methods"]["apar"]["speed"]["realized_speedup"]["geomean"]
        assert (realized is None) == (batch > 1)
    for label in ("sequential", "apar", "sot"):
        for rid, row in outs[1][label].items():
            batched = outs[3][label][rid]
            assert batched["output"] == row["output"] and batched["wall_s"] is None
            assert batched["batched"] == 3 and row["wall_s"] > 0


def test_never_more_requests_in_flight_than_max_batch(tiny, pasta_tokenizer, vocab):
    """The planted bug (`<` read as `<=` at admission) passed every test: five
    requests, at most two in flight at any step, and two whenever two are waiting."""
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=1024, max_batch=2)
    for i, (p, a) in enumerate(zip(PROMPTS + PROMPTS[:1], ANSWERS + ANSWERS[:1])):
        batched.add(replay_request(vocab, pasta_tokenizer, i, p, a, "parallel"))
    ended, widest = [], 0
    while batched.busy:
        now = batched.step()
        # in flight during this step: those still running plus those that just ended
        widest = max(widest, len(batched.running) + len(now))
        assert len(batched.running) + len(now) <= 2
        ended += now
    assert widest == 2
    assert sorted(r.rid for r in ended) == [0, 1, 2, 3, 4]


def test_requests_sharing_a_prompt_reserve_it_once(tiny, pasta_tokenizer):
    """Three samples of one 20-token prompt with 8 new tokens each: the prompt's slots once,
    then 8 per request (20 + 3 x 8 = 44 of 64), all three admitted at the first step."""
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=64, max_batch=4)
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=8)
    for i in range(3):
        batched.add(BatchRequest(i, [5] * 20, cfg, group="g"))
    batched.step()
    assert len(batched.running) == 3 and batched.free_slots == 64 - 20 - 3 * 8


def test_a_shared_prompt_counts_in_each_samples_kv_read(tiny, pasta_tokenizer):
    """kv_read (the slots attention read, summed over decode steps: the bandwidth figure)
    of a sample sharing its prompt's KV is its solo decode's, and in sequential mode the
    closed form: step s (s = 1..passes) reads the prompt and the s answer tokens written."""
    from dataclasses import replace

    solo = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=1024, max_batch=4)
    prompt = text_ids(pasta_tokenizer, "Write three tips for learning a language.")
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=12,
                            sampling=SamplingConfig(temperature=1.0, seed=5))
    samples = batched.sample(prompt, cfg, n=3, seeds=[5, 6, 7])
    for k, s in enumerate(samples):
        alone = solo.generate(prompt, replace(cfg, sampling=replace(cfg.sampling, seed=5 + k)))
        assert s.ids == alone.ids and s.kv_read == alone.kv_read
        assert s.kv_read == sum(len(prompt) + step for step in range(1, s.forward_passes + 1))
