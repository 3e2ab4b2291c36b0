"""What a decode pass costs a GPU beyond its kernels, counted on the CPU with the device step
forced (`DeviceSlotStep`, `DevicePagedKV`): eager ops dispatched per pass do not grow with
the batch (a launch per op on a GPU), one upload per pass (a blocking copy each), no graph
built while a decode's context grows; the counters themselves checked on known calls."""

from __future__ import annotations

import pytest
import torch

from solm.core.chat import text_ids
from solm.core.sampling import SamplingConfig
from solm.core.structure import BATCH_ATTR_NAMES, and_masks, same_request
from solm.engines.torch.device_step import DeviceSlotStep, ROW_BUCKETS
from solm.engines.torch.host_sync import counting_pass_work

SAMPLED = SamplingConfig(temperature=1.0, top_p=0.9, repetition_penalty=1.2,
                         no_repeat_ngram=3, seed=3)
PLAN = ('Tips:\n1.<promise topic="sleep" tokens="2"/><async> Sleep well.</async>\n2.'
        '<promise topic="food" tokens="1"/><async> Eat greens.</async><sync/> Done.')
BATCHES = (1, 32)
OP_GROWTH = 1.2  # batch 32's ops per pass over batch 1's, at most


def steady(step, passes: int, skip: int = 0) -> tuple[list[int], list[int]]:
    """(ops, uploads) of each of up to `passes` calls of `step` after `skip` uncounted ones
    (a call returning False ends the run)."""
    for _ in range(skip):
        step()
    ops, uploads = [], []
    for _ in range(passes):
        with counting_pass_work() as seen:
            if step() is False:
                break
        ops.append(seen.op_total)
        uploads.append(seen.upload_total)
    return ops, uploads


def check(counts: dict[int, tuple[list[int], list[int]]]) -> None:
    (ops1, up1), (ops32, up32) = counts[1], counts[32]
    assert ops1 and ops32
    assert max(ops32) <= OP_GROWTH * max(ops1), (max(ops1), max(ops32))
    # stricter than the ratio: fewer extra ops than extra rows, so one op per row fails
    assert max(ops32) - max(ops1) < BATCHES[1] - BATCHES[0], (max(ops1), max(ops32))
    assert max(up1 + up32) <= 1, (up1, up32)


def pasta_runtime(tok, model, batch: int, mode: str):
    from solm.core.systems.pasta import ATTR_NAMES, pasta_visible
    from solm.decode.pasta.batched import BatchedPastaRuntime, BatchRequest
    from solm.decode.pasta.runtime import PastaDecodeConfig, replay_scripts

    step = DeviceSlotStep(model, 8192, and_masks(same_request, pasta_visible),
                          (*ATTR_NAMES, *BATCH_ATTR_NAMES))
    rt = BatchedPastaRuntime(model, tok, pool_size=8192, max_batch=batch, forward=step)
    vocab = rt.vocab
    for i in range(batch):
        cfg = PastaDecodeConfig(mode=mode, max_new_tokens=60,
                                sampling=SamplingConfig(**{**SAMPLED.__dict__, "seed": i}))
        prompt = text_ids(tok, f"Question {i}: give tips.")
        if mode == "parallel":  # main follows a plan, its blocks fork and sample
            streams, anchors = replay_scripts(text_ids(tok, PLAN), vocab)
            rt.add(BatchRequest(i, prompt, cfg, scripts={0: streams[0]},
                                sample_unscripted=True, replay_anchors=frozenset(anchors)))
        else:
            rt.add(BatchRequest(i, prompt, cfg))
    rt.step()  # admission: the prefills
    return rt


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_pasta_passes_cost_the_same_ops_at_any_batch_and_one_upload(tiny, pasta_tokenizer,
                                                                    mode):
    counts = {}
    for b in BATCHES:
        rt = pasta_runtime(pasta_tokenizer, tiny, b, mode)
        counts[b] = steady(lambda: rt.step() if rt.busy else False, 12)
        threads = max(len(r.state.threads) for r in rt.running) if rt.running else 0
        assert mode == "sequential" or threads >= 2  # blocks decoded beside main
    check(counts)


def test_sot_passes_cost_the_same_ops_at_any_batch_and_one_upload(tiny, pasta_tokenizer):
    from solm.core.systems.sot import ATTR_NAMES, sot_visible
    from solm.decode.sot.batched import BatchedSotRuntime
    from solm.decode.sot.runtime import SotConfig

    counts = {}
    for b in BATCHES:
        step = DeviceSlotStep(tiny, 32768, and_masks(same_request, sot_visible),
                              (*ATTR_NAMES, *BATCH_ATTR_NAMES))
        rt = BatchedSotRuntime(tiny, pasta_tokenizer, pool_size=32768, max_batch=b,
                               forward=step)
        seen: list[tuple[int, int]] = []
        original = rt._step

        def counted(running):
            with counting_pass_work() as work:
                original(running)
            if all(q.stage in ("skeleton", "points") for q in running) and running:
                seen.append((work.op_total, work.upload_total))

        rt._step = counted
        cfg = SotConfig(max_skeleton_tokens=10, max_point_tokens=6, sampling=SAMPLED)
        list(rt.run([(i, f"Name {i} fruits.") for i in range(b)], cfg))
        counts[b] = ([o for o, _ in seen], [u for _, u in seen])
    check(counts)


def test_planned_diffusion_passes_cost_the_same_ops_at_any_batch_and_one_upload(pdiff_model,
                                                                                pdiff_tok):
    from solm.core.systems.pdiff import ATTR_NAMES, pdiff_visible
    from solm.decode.pdiff.runtime import PdiffDecodeConfig, PdiffRequest, PdiffRuntime

    plan = text_ids(pdiff_tok, 'Intro <promise topic="a" tokens="1"/> and <promise '
                               'topic="b" tokens="2"/><sync/> end.')
    counts = {}
    for b in BATCHES:
        step = DeviceSlotStep(pdiff_model, 16384, and_masks(same_request, pdiff_visible),
                              (*ATTR_NAMES, *BATCH_ATTR_NAMES))
        rt = PdiffRuntime(pdiff_model, pdiff_tok, pool_size=16384, max_batch=b, forward=step)
        rt.masks()  # the grammar's masks, built once per runtime, not per pass
        cfg = PdiffDecodeConfig(max_new_tokens=120, chunk_temperature=1.0, sampling=SAMPLED)
        for i in range(b):
            rt.waiting.append(PdiffRequest(i, text_ids(pdiff_tok, f"Question {i}?"), cfg, plan))
        list(rt._admit())
        denoised = []

        def one():
            if not rt.running:
                return False
            list(rt._step())
            denoised.append(any(r.denoising for r in rt.running))
        counts[b] = steady(one, 40)
        assert any(denoised)
    check(counts)


def test_tip_passes_cost_the_same_ops_at_any_batch_and_one_upload(tip_model, tip_tok):
    from solm.decode.tip.config import TipDecodeConfig
    from solm.decode.tip.runtime import TipRequest, TipRuntime
    from solm.engines.torch.device_paged import DevicePagedKV

    counts = {}
    for b in BATCHES:
        rt = TipRuntime(tip_model, tip_tok, num_pages=4096, page_size=8, num_registers=4,
                        kv=DevicePagedKV(tip_model, 8192))
        cfg = TipDecodeConfig(policy="tip", batch_size=b, max_new_tokens=40,
                              sampling=SamplingConfig(temperature=1.0, top_p=0.95, seed=3))
        session = rt.session(cfg)
        for i in range(b):
            session.add(TipRequest(i, [200, 300, 400 + i], seed=i))
        session.step()  # admission
        counts[b] = steady(session.step, 20)
    check(counts)


def test_the_device_paged_kv_decodes_what_the_paged_runtime_does(tip_model, tip_tok):
    """Greedy and sampled, dense and tip (registers reused, steps killed): the device KV's
    answers and logits are the paged runtime's."""
    from solm.decode.tip.config import TipDecodeConfig
    from solm.decode.tip.runtime import TipRequest, TipRuntime
    from solm.engines.torch.device_paged import DevicePagedKV

    for policy in ("dense", "tip"):
        cfg = TipDecodeConfig(policy=policy, batch_size=3, max_new_tokens=30, record_logits=True,
                              sampling=SamplingConfig(temperature=1.0, seed=5))
        out = []
        for kv in (None, DevicePagedKV(tip_model, 2048, extent=8)):
            rt = TipRuntime(tip_model, tip_tok, num_pages=256, page_size=4, num_registers=4,
                            kv=kv)
            reqs = [TipRequest(i, [200 + i, 300, 400, 500 + i], seed=i) for i in range(3)]
            out.append({r.rid: r for r in rt.run(reqs, cfg)})
        for rid in range(3):
            a, b = out[0][rid], out[1][rid]
            assert a.ids == b.ids
            assert (a.logits - b.logits).abs().max() < 1e-4


def test_no_graph_is_built_while_a_decodes_context_grows(tiny, pasta_tokenizer):
    """Compiled (a cheap backend: the count is what matters), one request's context grown
    from 100 to 3,000 tokens by prefills between decode passes: the decode passes build one
    graph, at the first, and none after; `warm_up` builds every row bucket ahead."""
    from solm.core.systems.pasta import ATTR_NAMES, pasta_visible

    names = (*ATTR_NAMES, *BATCH_ATTR_NAMES)
    step = DeviceSlotStep(tiny, 4096, and_masks(same_request, pasta_visible), names,
                          compile=True, backend="eager")
    assert step.warm_up(32) >= 0 and step.graphs == ROW_BUCKETS.index(32) + 1
    built = step.graphs
    used = 0

    def attrs(n, start):
        return {"thread": [0] * n, "order": list(range(start, start + n)),
                "anchor": list(range(start, start + n)), "epoch": [0] * n, "join": [0] * n,
                "request": [1] * n, "group": [-1] * n, "shared": [0] * n}

    for length in (100, 400, 1000, 2000, 3000):
        grow = length - used
        step(list(range(5, 5 + grow)), list(range(used, length)), attrs(grow, used),
             list(range(used, length)), [(grow, [(0, length)])], prefill=True)
        used = length
        step([7], [used], attrs(1, used), [used], [(1, [(0, used + 1)])])
        used += 1
    assert step.graphs == built  # the one-row bucket was warmed: nothing built since


def test_a_prefill_attends_over_its_own_window(tiny, pasta_tokenizer):
    """A prompt's pass reads the window of slots its reads cover (its own), not the pool: its
    mask is [prompt, prompt], what a plain causal forward of it builds."""
    from solm.core.systems.pasta import ATTR_NAMES, pasta_visible

    step = DeviceSlotStep(tiny, 4096, and_masks(same_request, pasta_visible),
                          (*ATTR_NAMES, *BATCH_ATTR_NAMES))
    shapes = []
    mask = step._mask
    step._mask = lambda row_attrs, lo, hi: shapes.append((row_attrs.shape[1], hi - lo)) or \
        mask(row_attrs, lo, hi)
    n = 50
    attrs = {"thread": [0] * n, "order": list(range(n)), "anchor": list(range(n)),
             "epoch": [0] * n, "join": [0] * n, "request": [1] * n, "group": [-1] * n,
             "shared": [0] * n}
    step(list(range(5, 5 + n)), list(range(n)), attrs, list(range(1000, 1000 + n)),
         [(n, [(1000, 1000 + n)])], prefill=True)
    assert shapes == [(n, n)]


def test_the_pass_counter_sees_each_kind():
    x = torch.arange(6.0)
    with counting_pass_work() as seen:
        torch.tensor([1, 2])
        torch.as_tensor([3.0])
        torch.from_numpy(__import__("numpy").arange(3))
        y = x * 2
        y.tolist()
        torch.zeros(4)
    assert seen.upload_total == 3 and seen.syncs.total == 1
    assert seen.ops["aten::mul"] == 1 and seen.ops["aten::zeros"] == 1
