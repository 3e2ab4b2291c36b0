"""Every system's compiled step (inductor, fp32) gives its eager step's logits within 1e-5,
and each compiled body traces whole: no graph break (dynamo's `explain`).

The batched step (`SlotStep`) is driven by each system's own `structure()`: its tokens fed in
training order, a prompt prefilled, then passes of 1 to 16 tokens (the compiled buckets and
their padding), masked by the system's term. TIP's paged step and the one-decode pool step
(`PoolStep`) run through their runtimes; TIP's compiled paged step is held to the same
1e-5 in `tests/test_compiled_step.py`."""

from __future__ import annotations

import pytest
import torch

from solm.core.chat import text_ids
from solm.core.structure import BATCH_ATTR_NAMES, and_masks, same_request
from solm.engines.torch.attention import attention_implementation, reading_segments
from solm.engines.torch.slots import SlotStep

TOL = 1e-5
PASTA = ('Tips:\n1.<promise topic="sleep" tokens="2"/><async> Sleep eight hours a night and '
         'keep the hours.</async>\n2.<promise topic="food" tokens="1"/><async> Eat greens '
         'and fruit.</async><sync/> Done, and that is all there is to it.')
WIDTHS = [1, 8, 3, 16, 5, 1, 12]


def system_case(name: str, tok):
    """(mask term, attribute names, structure) of one answer of `name`."""
    if name == "pasta":
        from solm.core.systems import pasta

        vocab = pasta.PastaVocab.from_tokenizer(tok)
        return pasta.pasta_visible, pasta.ATTR_NAMES, pasta.structure(text_ids(tok, PASTA), vocab)
    if name == "sot":
        from solm.core.systems import sot

        prefix = text_ids(tok, "Question: name fruit. Skeleton: 1. Apples 2. Pears. Expand:")
        points = [text_ids(tok, " Apples are red and sweet."),
                  text_ids(tok, " Pears are soft and grow on trees in autumn.")]
        return sot.sot_visible, sot.ATTR_NAMES, sot.structure(prefix, points)
    from solm.core.systems import pdiff

    vocab = pdiff.PdiffVocab.from_tokenizer(tok)
    laid = pdiff.to_slots(text_ids(tok, PASTA), vocab)
    return pdiff.pdiff_visible, pdiff.ATTR_NAMES, pdiff.structure(laid, vocab)


def drive(step: SlotStep, ids: list[int], struct, names, prefill: int) -> torch.Tensor:
    """Feed the structure's tokens: `prefill` at once, then passes of WIDTHS in turn."""
    pos = struct.position_ids.tolist()
    cols = {n: struct.attrs[n].tolist() for n in names}

    def columns(a: int, b: int) -> dict:
        out = {n: cols[n][a:b] for n in names}
        out.update(request=[1] * (b - a), group=[-1] * (b - a), shared=[0] * (b - a))
        return out

    out, at, k = [], prefill, 0
    step(ids[:prefill], pos[:prefill], columns(0, prefill), range(prefill),
         [(prefill, [(0, prefill)])], prefill=True)
    while at < len(ids):
        n = min(WIDTHS[k % len(WIDTHS)], len(ids) - at)
        out.append(step(ids[at:at + n], pos[at:at + n], columns(at, at + n), range(at, at + n),
                        [(n, [(0, at + n)])]))
        at, k = at + n, k + 1
    return torch.cat(out)


@pytest.fixture(scope="module")
def tokenizers(pasta_tokenizer, pdiff_tok):
    return {"pasta": pasta_tokenizer, "sot": pasta_tokenizer, "pdiff": pdiff_tok}


@pytest.fixture(scope="module")
def models(tiny, pdiff_model):
    return {"pasta": tiny, "sot": tiny, "pdiff": pdiff_model}


@pytest.mark.parametrize("system", ["pasta", "sot", "pdiff"])
def test_the_batched_step_compiled_equals_eager(system, tokenizers, models):
    tok, model = tokenizers[system], models[system]
    term, names, struct = system_case(system, tok)
    ids = _ids_of(system, tok)
    visible = and_masks(same_request, term)
    logits = {}
    for compiled in (False, True):
        step = SlotStep(model, 512, visible, (*names, *BATCH_ATTR_NAMES), compile=compiled)
        logits[compiled] = drive(step, ids, struct, names, prefill=10)
    assert step.compiled.compiles >= 3  # the buckets 1, 8 and 16 at least
    assert logits[False].shape[0] == len(ids) - 10
    assert (logits[True] - logits[False]).abs().max().item() < TOL


def _ids_of(system: str, tok) -> list[int]:
    if system == "pasta":
        return text_ids(tok, PASTA)
    if system == "sot":
        prefix = text_ids(tok, "Question: name fruit. Skeleton: 1. Apples 2. Pears. Expand:")
        return prefix + text_ids(tok, " Apples are red and sweet.") + text_ids(
            tok, " Pears are soft and grow on trees in autumn.")
    from solm.core.systems import pdiff

    return pdiff.to_slots(text_ids(tok, PASTA), pdiff.PdiffVocab.from_tokenizer(tok))


def breaks(fn, *args) -> int:
    import torch._dynamo

    torch._dynamo.reset()
    return torch._dynamo.explain(fn)(*args).graph_break_count


def test_the_batched_step_traces_without_a_break(tiny, pasta_tokenizer):
    from solm.core.systems.pasta import ATTR_NAMES, pasta_visible

    step = SlotStep(tiny, 64, and_masks(same_request, pasta_visible),
                    (*ATTR_NAMES, *BATCH_ATTR_NAMES), compile=True)
    ids = torch.tensor([[5, 6, 7, 8, 0, 0, 0, 0]])
    pos = torch.arange(8)[None]
    segments = step.segments(torch.arange(8), [(8, [(0, 8)])])
    with attention_implementation(tiny), reading_segments(segments):
        assert breaks(step._body, ids, pos, torch.arange(8)) == 0


def test_the_pool_step_traces_without_a_break(tiny):
    from solm.core.systems.pasta import ATTR_NAMES, pasta_visible
    from solm.engines.torch.compiled import KV_BLOCK, TOKEN_BUCKET_MAX, padded_step_inputs, \
        pool_body
    from solm.engines.torch.step import PoolStep

    step = PoolStep(tiny, 256, pasta_visible, ATTR_NAMES, compile=True)
    args = padded_step_inputs([5, 6, 7], [0, 1, 2], torch.ones(3, 3, dtype=torch.bool).tril(), 0,
                              TOKEN_BUCKET_MAX, KV_BLOCK, step.capacity, step.device)
    with attention_implementation(tiny):
        assert breaks(pool_body(tiny, step.cache, step.head), *args) == 0


def test_the_paged_step_traces_without_a_break(tip_model, tip_tok):
    from solm.engines.torch.compiled import paged_body
    from solm.decode.tip.runtime import TipRuntime

    rt = TipRuntime(tip_model, tip_tok, num_pages=16, page_size=4, num_registers=4,
                    compile=True)
    b, length = 2, 8
    index = torch.arange(b * length)
    mask = torch.ones(b, 1, 1, length, dtype=torch.bool)
    with attention_implementation(tip_model):
        assert breaks(paged_body(tip_model, rt.cache, rt.head), torch.tensor([[5], [6]]),
                      torch.tensor([[3], [4]]), mask, torch.tensor([20, 21]), index) == 0


def test_the_pool_step_compiled_equals_eager(tiny, pasta_tokenizer):
    from solm.decode.pasta.runtime import PastaRuntime

    response = text_ids(pasta_tokenizer, PASTA)
    out = [PastaRuntime(tiny, pasta_tokenizer, pool_size=512, compile=c).replay(
        [5, 6, 7, 8, 9], response, record_logits=True) for c in (False, True)]
    assert out[0].threads == 2 and out[0].ids == out[1].ids
    assert (out[1].logits - out[0].logits).abs().max().item() < TOL


def test_planned_diffusion_and_sot_runtimes_compile_their_passes(pdiff_model, pdiff_tok, tiny,
                                                                 pasta_tokenizer):
    """`compile` reaches the batched runtimes of Planned Diffusion and Skeleton-of-Thought:
    graphs are built, and the answers are the eager runtime's."""
    from solm.decode.pdiff.runtime import PdiffDecodeConfig, PdiffRuntime
    from solm.decode.sot.batched import BatchedSotRuntime
    from solm.decode.sot.runtime import SotConfig

    plan = text_ids(pdiff_tok, 'Intro <promise topic="a" tokens="1"/> and more<sync/> end.')
    prompt = text_ids(pdiff_tok, "Question?")
    cfg = PdiffDecodeConfig(max_new_tokens=60)
    pd = [PdiffRuntime(pdiff_model, pdiff_tok, pool_size=512, compile=c,
                       compile_backend="eager") for c in (False, True)]
    answers = [rt.generate(prompt, cfg, script=plan).ids for rt in pd]
    assert answers[0] == answers[1] and pd[1].forward.compiled.compiles >= 1
    assert pd[0].forward.compiled is None
    sot_cfg = SotConfig(max_skeleton_tokens=12, max_point_tokens=6)
    st = [BatchedSotRuntime(tiny, pasta_tokenizer, pool_size=2048, max_batch=2, compile=c,
                            compile_backend="eager") for c in (False, True)]
    out = [dict(rt.run([(0, "Name fruit."), (1, "Name trees.")], sot_cfg)) for rt in st]
    assert [out[0][i].text for i in (0, 1)] == [out[1][i].text for i in (0, 1)]
    assert st[1].forward.compiled.compiles >= 1 and st[0].forward.compiled is None


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("system", ["pasta", "sot", "pdiff"])
def test_the_all_tensor_step_equals_the_segmented_one(system, compiled, tokenizers, models):
    """The step CUDA graphs replay (`DeviceSlotStep`: one upload, the mask evaluated on the
    device over the slots' attributes, attention over the pool in place) against `SlotStep`
    (attention per request), on each system's structure, passes of 1 to 16 tokens; nothing
    in its pass reads a device value."""
    from solm.engines.torch.host_sync import counting_host_syncs
    from solm.engines.torch.device_step import DeviceSlotStep

    tok, model = tokenizers[system], models[system]
    term, names, struct = system_case(system, tok)
    ids = _ids_of(system, tok)
    visible = and_masks(same_request, term)
    reference = drive(SlotStep(model, 512, visible, (*names, *BATCH_ATTR_NAMES)), ids, struct,
                      names, prefill=10)
    step = DeviceSlotStep(model, 512, visible, (*names, *BATCH_ATTR_NAMES), compile=compiled,
                          backend="eager")
    syncs = []

    def counted(*args, **kwargs):  # (a dispatch mode keeps dynamo out: eager only)
        with counting_host_syncs() as seen:
            out = step(*args, **kwargs)
        syncs.append(seen.total)
        return out

    got = drive(step if compiled else counted, ids, struct, names, prefill=10)
    assert compiled or (len(syncs) >= 5 and max(syncs) == 0)
    assert (got - reference).abs().max().item() < TOL
    if compiled:
        assert step.compiled.compiles >= 3


def test_continuous_batching_on_the_all_tensor_step_reads_each_solo_decode(tiny, pasta_tokenizer,
                                                                           vocab):
    """Requests joining and leaving a pool that the all-tensor step serves: each request's
    logits are its solo decode's (within float summation order)."""
    from test_batched import ANSWERS, PROMPTS, replay_request

    from solm.core.systems.pasta import ATTR_NAMES, pasta_visible
    from solm.decode.pasta.batched import BatchedPastaRuntime
    from solm.decode.pasta.runtime import PastaRuntime
    from solm.engines.torch.device_step import DeviceSlotStep

    step = DeviceSlotStep(tiny, 1024, and_masks(same_request, pasta_visible),
                          (*ATTR_NAMES, *BATCH_ATTR_NAMES), compile=True, backend="eager")
    batched = BatchedPastaRuntime(tiny, pasta_tokenizer, pool_size=1024, max_batch=2,
                                  forward=step)
    solo = PastaRuntime(tiny, pasta_tokenizer, pool_size=1024)
    reqs = [replay_request(vocab, pasta_tokenizer, i, p, a)
            for i, (p, a) in enumerate(zip(PROMPTS, ANSWERS))]
    done = 0
    for r in batched.run(reqs):
        alone = solo.replay(text_ids(pasta_tokenizer, PROMPTS[r.rid]),
                            text_ids(pasta_tokenizer, ANSWERS[r.rid]), record_logits=True)
        assert r.result.ids == alone.ids
        assert (r.result.logits - alone.logits).abs().max().item() < TOL
        done += 1
    assert done == 4 and step.compiled.compiles >= 2
