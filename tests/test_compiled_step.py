"""The compiled decode step computes what the eager step computes (fp32, < 1e-4) through
forks, joins and every bucket boundary, and stops compiling once its buckets exist."""

import pytest
import torch

from solm.core.chat import text_ids
from solm.engines.torch.compiled import bucket, kv_bucket, should_compile
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime

ITEMS = ["Sleep eight hours every night and keep the same hours on weekends too.",
         "Eat greens and fruit every day, and cook at home more than you eat out.",
         "Walk for an hour a day, or take the stairs instead of the lift at work.",
         "Drink water with every meal instead of soda or sweet juice.",
         "See friends every week, even for a short coffee after work.",
         "Read a book before bed instead of looking at a phone screen."]
# each block runs while main writes the next promises: steps feed 1 to 7 tokens, in the
# token buckets 1 and 8
TEXT = "Tips:" + "".join(
    f'\n{i + 1}.<promise topic="t{i}" tokens="{3 * len(item.split())}"/><async> {item} {item}'
    f' {item}</async>' for i, item in enumerate(ITEMS)) + "<sync/> Done."


@pytest.fixture(scope="module")
def runtimes(tiny, pasta_tokenizer):
    eager = PastaRuntime(tiny, pasta_tokenizer, pool_size=1024)
    compiled = PastaRuntime(tiny, pasta_tokenizer, pool_size=1024, compile=True)
    return eager, compiled


def test_buckets():
    assert [bucket(n, 16) for n in (1, 2, 3, 5, 8, 9, 16)] == [1, 8, 8, 8, 8, 16, 16]
    assert bucket(3, 4) == 4  # never past the largest bucket asked for
    with pytest.raises(ValueError):
        bucket(17, 16)
    assert [kv_bucket(n, 256, 528) for n in (1, 256, 257, 513, 600)] == [256, 256, 512, 528, 528]
    assert should_compile(False, 10 ** 9, "cpu") is False
    assert should_compile(None, 10, "cpu") is False
    assert should_compile(None, 10 ** 6, "cpu") is True


@pytest.mark.parametrize("prompt_len", [20, 300])  # 300: the keys read cross 512
def test_compiled_replay_logits_equal_eager(runtimes, pasta_tokenizer, prompt_len):
    eager, compiled = runtimes
    response = text_ids(pasta_tokenizer, TEXT)
    prompt = [(7 * i) % 900 + 5 for i in range(prompt_len)]
    a = eager.replay(prompt, response, record_logits=True)
    b = compiled.replay(prompt, response, record_logits=True)
    assert a.ids == b.ids == response
    assert a.threads == len(ITEMS) and a.forward_passes == b.forward_passes
    assert a.tokens_fed - a.forward_passes > 4 * len(ITEMS)  # steps fed several threads
    assert (a.logits - b.logits).abs().max().item() < 1e-4
    if prompt_len > 200:
        assert compiled.used > 512  # the run crossed a key bucket


def test_compiled_sampling_follows_the_eager_decode(runtimes):
    eager, compiled = runtimes
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=40, record_logits=True)
    a = eager.generate([5, 6, 7, 8], cfg)
    b = compiled.generate([5, 6, 7, 8], cfg)
    assert a.ids == b.ids
    assert (a.logits - b.logits).abs().max().item() < 1e-4


def test_no_recompilation_after_warm_up_over_a_long_decode(tiny, pasta_tokenizer):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=1024, compile=True,
                      compile_backend="eager")
    built = rt.forward.compile_buckets(max_fed=1, max_slots=1024)
    assert built == 3  # one token per step; keys read: 256, 512, 1024
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=900)
    res = rt.generate([5, 6, 7, 8], cfg)
    assert res.forward_passes > 512  # crossed every key bucket
    assert rt.forward.compiled.compiles == built
    assert res.compile_s == 0.0


def test_a_step_that_compiles_is_not_counted_as_decode_time(tiny, pasta_tokenizer):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=256, compile=True)
    res = rt.generate([5, 6, 7], PastaDecodeConfig(mode="sequential", max_new_tokens=8))
    assert rt.forward.compiled.compiles >= 1 and res.compile_s > 0
    assert res.decode_s < res.compile_s  # a graph takes seconds; eight tiny steps do not
    torch._dynamo.reset()


@pytest.mark.parametrize("policy", ["dense", "tip"])
def test_compiled_tip_step_logits_equal_eager(tip_model, tip_tok, policy):
    """Rows of different lengths, refills, a last row decoding alone (padded batch), reads
    crossing 256 (dense), pages evicted (tip)."""
    from conftest import TIP_REGISTERS
    from policy_matrix import register_traces

    from solm.decode.tip.runtime import TipDecodeConfig, TipRuntime

    reqs = register_traces(tip_tok, 3, 280, seed=4)
    reqs[1].forced = reqs[1].forced[:120]
    cfg = TipDecodeConfig(policy=policy, batch_size=2, record_logits=True, check_reads=True)
    runs = {}
    for compiled in (False, True):
        rt = TipRuntime(tip_model, tip_tok, num_pages=256, page_size=4,
                        num_registers=TIP_REGISTERS, compile=compiled)
        runs[compiled] = {r.rid: r for r in rt.run(reqs, cfg)}
    assert rt.compiled.compiles >= 1
    for rid, eager in runs[False].items():
        fast = runs[True][rid]
        assert fast.ids == eager.ids == reqs[rid].forced
        assert fast.mean_live_tokens == eager.mean_live_tokens
        assert (fast.logits - eager.logits).abs().max().item() < 1e-5
    if policy == "tip":
        assert all(r.evicted_pages > 0 for r in runs[True].values())
    else:
        assert max(r.peak_live_tokens for r in runs[True].values()) > 256


def test_every_padded_row_reads_a_key_and_real_rows_read_what_they_see():
    """Padding a step to its bucket: each padded row attends to exactly one key (slot 0; a
    fully masked row gives NaN on some torch builds), real rows keep their own visibility, and
    the padded writes go past the real slots, inside the pool's capacity."""
    from solm.engines.torch.compiled import TOKEN_BUCKET_MAX, padded_step_inputs

    for n in range(1, TOKEN_BUCKET_MAX + 1):
        first, capacity = 1000 - n, 1000 + TOKEN_BUCKET_MAX
        visible = torch.rand(n, first + n) > 0.5
        ids, pos, mask, slots = padded_step_inputs(list(range(n)), [first] * n, visible, first,
                                                   TOKEN_BUCKET_MAX, 256, capacity, "cpu")
        m = mask[0, 0]
        b = bucket(n, TOKEN_BUCKET_MAX)
        assert m.shape[0] == b and m.shape[1] >= first + n
        assert torch.equal(m[:n, :first + n], visible) and not m[:n, first + n:].any()
        assert (m[n:].sum(-1) == 1).all() and m[n:, 0].all()
        assert slots.tolist() == list(range(first, first + b)) and slots.max() < capacity


def test_a_padded_step_at_the_end_of_a_nearly_full_pool_equals_eager(tiny, pasta_tokenizer):
    """The last steps of a full pool: 5 threads (bucket 8) fed when 3 slots are left for
    padding past the end; logits equal the eager step's (graphs built with the eager
    backend: this checks the padding, not inductor)."""
    from solm.core.systems.sot import ATTR_NAMES, SotTracker, sot_visible
    from solm.engines.torch.step import PoolStep

    pool = 300
    eager = PoolStep(tiny, pool, sot_visible, ATTR_NAMES)
    compiled = PoolStep(tiny, pool, sot_visible, ATTR_NAMES, compile=True, backend="eager")
    prefix = [(11 * i) % 900 + 5 for i in range(pool - 5 * 4 - 3)]
    outs = []
    for step in (eager, compiled):
        tracker = SotTracker()
        step([*prefix], [tracker.prefix(t) for t in prefix], prefill=True)
        rows = []
        for k in range(4):  # 5 points, 4 tokens each: the pool ends 3 slots short of full
            toks = [20 + p + k for p in range(5)]
            rows.append(step(toks, [tracker.point(p + 1, t) for p, t in enumerate(toks)]))
        assert step.used == pool - 3 and step.fits(3) and not step.fits(4)
        toks = [7, 8, 9]
        rows.append(step(toks, [tracker.point(p + 1, t) for p, t in enumerate(toks)]))
        assert step.used == pool
        outs.append(torch.cat(rows))
    assert compiled.compiled.compiles >= 1  # widths 5 and 3 both pad to 8: past the pool's end
    assert torch.isfinite(outs[1]).all()
    assert (outs[0] - outs[1]).abs().max().item() < 1e-4
