"""A decode pass waits for the device at most once: every system's step, batched, copies
the chosen ids of all its rows to the host in one call, and nothing else of the pass reads a
device value (counted with `counting_host_syncs`, which sees `.item`/`.tolist`/`int(t)`...
and the ops whose output shape depends on data)."""

from __future__ import annotations

import pytest
import torch

from solm.core.chat import text_ids
from solm.core.sampling import Sampler, SamplingConfig
from solm.decode.pasta.batched import BatchedPastaRuntime, BatchRequest
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime, replay_scripts
from solm.engines.torch.host_sync import counting_host_syncs

SAMPLED = SamplingConfig(temperature=1.0, top_p=0.9, repetition_penalty=1.2, seed=3)
PLAN = ('Tips:\n1.<promise topic="sleep" tokens="2"/><async> Sleep well.</async>\n2.'
        '<promise topic="food" tokens="1"/><async> Eat greens.</async><sync/> Done.')


def syncs_per_pass(step, passes: int, ready=lambda: True) -> list[int]:
    """Host syncs of each of up to `passes` calls of `step` (calls where `ready()` is false,
    e.g. ones that admit a request with its prefill, are run but not counted)."""
    counts = []
    for _ in range(passes):
        if not ready():
            step()
            continue
        with counting_host_syncs() as seen:
            if step() is False:
                break
        counts.append(seen.total)
    return counts


def test_the_counter_sees_per_row_reads():
    x = torch.arange(6.0)
    with counting_host_syncs() as seen:
        [int(v) for v in x[:3]]
        x.tolist()
        x.nonzero()
        x[x > 2]
    assert seen.total == 6
    assert seen.calls["Tensor.__int__"] == 3


def pasta_requests(tok, vocab, n: int, mode: str, logprobs: bool = False):
    reqs = []
    for i in range(n):
        cfg = PastaDecodeConfig(mode=mode, max_new_tokens=40, record_logprobs=logprobs,
                                sampling=SamplingConfig(**{**SAMPLED.__dict__, "seed": i}))
        prompt = text_ids(tok, f"Question {i}: give tips.")
        if mode == "parallel" and i % 2 == 0:  # main follows a plan, the blocks sample
            streams, anchors = replay_scripts(text_ids(tok, PLAN), vocab)
            reqs.append(BatchRequest(i, prompt, cfg, scripts={0: streams[0]},
                                     sample_unscripted=True, replay_anchors=frozenset(anchors)))
        else:
            reqs.append(BatchRequest(i, prompt, cfg))
    return reqs


@pytest.mark.parametrize("mode,logprobs", [("parallel", False), ("parallel", True),
                                           ("sequential", False)])
def test_pasta_batched_pass_copies_once(tiny, pasta_tokenizer, vocab, mode, logprobs):
    rt = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=1024, max_batch=4)
    for r in pasta_requests(pasta_tokenizer, vocab, 4, mode, logprobs):
        rt.add(r)
    rt.step()  # admission: four prefills
    fed_before = sum(r.state.fed_total for r in rt.running)
    counts = syncs_per_pass(lambda: rt.step() if rt.busy else False, 12,
                            ready=lambda: not rt.waiting)
    assert counts and max(counts) <= 1
    if mode == "parallel":  # blocks decoded beside main: several rows per request
        assert sum(r.state.fed_total for r in rt.running) - fed_before > 12 * len(rt.running)


def test_pasta_solo_step_copies_once(tiny, pasta_tokenizer, vocab):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    cfg = PastaDecodeConfig(max_new_tokens=40, sampling=SAMPLED)
    streams, anchors = replay_scripts(text_ids(pasta_tokenizer, PLAN), vocab)
    state = rt.prefill(text_ids(pasta_tokenizer, "Give tips."), cfg, rt.chooser(cfg),
                       {0: streams[0]}, anchors)
    state.replay_anchors = set(anchors)
    counts = syncs_per_pass(lambda: rt.step(state), 20)
    assert counts and max(counts) <= 1


def test_a_chooser_that_reads_per_row_is_counted(tiny, pasta_tokenizer, vocab):
    """The budget is a real check: the same decode with a per-row chooser (one copy per
    thread, as every runtime did before batched sampling) goes over it."""
    rt = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=1024, max_batch=4)
    sampler = Sampler(SAMPLED)
    for r in pasta_requests(pasta_tokenizer, vocab, 4, "parallel"):
        r.chooser = lambda thread, logits, state: sampler(logits)
        rt.add(r)
    rt.step()
    counts = syncs_per_pass(lambda: rt.step() if rt.busy else False, 12)
    assert max(counts) >= 4


def test_tip_pass_copies_once(tip_model, tip_tok):
    from solm.decode.tip.config import TipDecodeConfig
    from solm.decode.tip.runtime import TipRequest, TipRuntime

    rt = TipRuntime(tip_model, tip_tok, num_pages=64, page_size=8, num_registers=4)
    cfg = TipDecodeConfig(policy="tip", batch_size=4, max_new_tokens=30, record_logprobs=True,
                          sampling=SAMPLED)
    session = rt.session(cfg)
    for i in range(4):
        session.add(TipRequest(i, [200, 300, 400 + i], seed=i))
    session.step()  # admission
    counts = syncs_per_pass(session.step, 10, ready=lambda: not session.waiting)
    assert counts and max(counts) <= 1


def test_sot_batched_pass_copies_once(tiny, pasta_tokenizer, monkeypatch):
    from solm.decode.sot import runtime as sot_runtime
    from solm.decode.sot.batched import BatchedSotRuntime
    from solm.decode.sot.runtime import SotConfig

    eos = pasta_tokenizer.eos_token_id
    skeleton = text_ids(pasta_tokenizer, " Apples\n2. Pears\n3. Plums") + [eos]

    class PlannedSkeleton(Sampler):  # the skeleton is scripted, the points sample
        built = 0

        def __init__(self, config, **kw):
            super().__init__(config, **kw)
            self.script = skeleton if PlannedSkeleton.built == 0 else None
            PlannedSkeleton.built += 1

        def draw(self, banned=None, history=(), stream=0, index=0, bias=(), given=None):
            if self.script is not None:
                given = self.script[min(len(history), len(self.script) - 1)]
            return super().draw(banned, history, stream, index, bias, given)

        def __call__(self, logits, banned=None, history=()):
            if self.script is not None:
                return self.script[min(len(history), len(self.script) - 1)]
            return super().__call__(logits, banned, history)

    monkeypatch.setattr(sot_runtime, "Sampler", PlannedSkeleton)
    rt = BatchedSotRuntime(tiny, pasta_tokenizer, pool_size=2048, max_batch=2)
    cfg = SotConfig(max_point_tokens=12, stop_at_newline=False, sampling=SAMPLED)
    counts, steps = [], []
    original = rt._step

    def counted(running):
        with counting_host_syncs() as seen:
            original(running)
        counts.append(seen.total)
        steps.append(sum(len(q.point_pending) for q in running if q.stage == "points"))

    rt._step = counted
    results = dict(rt.run([(0, "Name three fruits.")], cfg))
    assert results[0].points == ["Apples", "Pears", "Plums"]
    assert max(steps) == 3 and max(counts) <= 1


def test_planned_diffusion_pass_copies_once(pdiff_model, pdiff_tok):
    """Plans written by the main threads (scripted) and chunks denoised with sampling, two
    requests in one pass: one copy for the main tokens and every masked slot's choice."""
    from solm.decode.pdiff.runtime import PdiffDecodeConfig, PdiffRequest, PdiffRuntime

    plan = ('Intro <promise topic="a" tokens="1"/> and <promise topic="b" tokens="2"/>'
            '<sync/> end.')
    rt = PdiffRuntime(pdiff_model, pdiff_tok, pool_size=1024, max_batch=2)
    cfg = PdiffDecodeConfig(max_new_tokens=120, chunk_temperature=1.0, sampling=SAMPLED)
    counts, kinds = [], []
    original = rt._step

    def counted():
        with counting_host_syncs() as seen:
            out = list(original())
        counts.append(seen.total)
        kinds.append(sum(r.denoise_passes for r in rt.running))
        return iter(out)

    rt._step = counted
    requests = [PdiffRequest(i, text_ids(pdiff_tok, f"Question {i}?"), cfg,
                             text_ids(pdiff_tok, plan) if i == 0 else None) for i in range(2)]
    results = {d.rid: d.result for d in rt.run(requests)}
    assert results[0].denoise_passes > 0 and max(kinds) > 0
    assert counts and max(counts) <= 1
