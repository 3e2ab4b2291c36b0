"""Planned Diffusion's sampler against its training side (one tiny random model, fp32)."""

import dataclasses
import itertools
import math

import pytest
import torch

from solm.core.chat import text_ids
from solm.core.systems.pdiff import predictor, structure
from solm.decode.flags import MAX_NEW_TOKENS
from solm.decode.pdiff.runtime import (CONTINUATION_CAP, PdiffDecodeConfig, PdiffRequest,
                                       PdiffRuntime)

PLAN = 'Intro <promise topic="a" tokens="1"/> and <promise topic="b" tokens="2"/><sync/> end.'
EQUAL = 'Two: <promise topic="a" tokens="1"/> and <promise topic="b" tokens="1"/><sync/> ok'


@pytest.fixture()
def rt(pdiff_model, pdiff_tok):
    return PdiffRuntime(pdiff_model, pdiff_tok, pool_size=1024, max_batch=4)


class Spy:
    """Wraps the runtime's SlotStep: the slots and the masks of every forward pass."""

    def __init__(self, rt):
        self.calls = []
        step = rt.forward
        original_segments, original_call = step.segments, step.__call__

        def segments(index, reads):
            segs = original_segments(index, reads)
            self.calls.append((index.tolist(), [s.ranges for s in segs],
                               [s.mask.clone() for s in segs]))
            return segs

        step.segments = segments
        self.step = step


def _decode(rt, tok, plan, **cfg):
    prompt = text_ids(tok, "Write something.")
    cfg.setdefault("steps_ratio", 1.0)  # one slot a step unless a test says otherwise
    config = PdiffDecodeConfig(max_new_tokens=300, record=True, **cfg)
    return prompt, rt.generate(prompt, config, script=text_ids(tok, plan))


def test_every_pass_reads_the_training_mask(rt, pdiff_tok, pdiff_vocab):
    spy = Spy(rt)
    prompt, res = _decode(rt, pdiff_tok, PLAN)
    assert res.denoise_passes > 0 and len(res.chunks) == 2
    seq = prompt + res.ids
    visible = structure(seq, pdiff_vocab).visible
    where = {slot: i for i, slot in enumerate(res.slots)}  # pool slot -> training index
    denoising = 0
    for index, ranges, masks in spy.calls[1:]:  # after the prompt's pass
        (rng,), mask = ranges[0], masks[0]
        keys = [where[s] for s in range(*rng)]
        queries = [where[s] for s in index]
        assert torch.equal(mask.cpu(), visible[queries][:, keys])
        denoising += len(index) > 1
    assert denoising == res.denoise_passes + 1  # + the pass writing the chunks' final KV


def _training_logits(model, seq, vocab):
    s = structure(seq, vocab)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([seq]), position_ids=s.position_ids[None],
                    attention_mask=s.visible[None, None])
    return out.logits[0], s


def test_denoising_logits_equal_the_training_forward(rt, pdiff_model, pdiff_tok, pdiff_vocab):
    prompt, res = _decode(rt, pdiff_tok, PLAN)
    seq = prompt + res.ids
    starts = [i for i, t in enumerate(seq) if t == pdiff_vocab.async_open]
    checked = 0
    for step in res.steps[::5]:
        state = list(seq)
        for k, (tokens, _) in step.items():
            state[starts[k]:starts[k] + len(tokens)] = tokens
        logits, _ = _training_logits(pdiff_model, state, pdiff_vocab)
        for k, (tokens, rows) in step.items():
            expected = logits[starts[k]:starts[k] + len(tokens)]
            assert (rows - expected).abs().max() < 1e-4
            checked += 1
    assert checked >= 4


def test_one_shift_convention_in_training_and_sampling(rt, pdiff_model, pdiff_tok,
                                                       pdiff_vocab):
    from solm.train.pdiff_sft import PdiffCollator, pdiff_loss

    # sampling: the token a slot takes is the best allowed token of the row before it
    _, res = _decode(rt, pdiff_tok, PLAN, steps_ratio=0.25)
    banned = rt.masks()["chunk"]
    differs = filled_total = 0
    for first, after in zip(res.steps, res.steps[1:]):
        for k, (tokens, rows) in first.items():
            if k not in after:
                continue
            allowed = rows.masked_fill(banned[: rows.shape[-1]], float("-inf"))
            filled = [j for j, t in enumerate(after[k][0])
                      if tokens[j] == pdiff_vocab.mask and t != pdiff_vocab.mask]
            for j in filled:
                assert after[k][0][j] == int(allowed[predictor(j)].argmax())
                differs += int(allowed[j].argmax()) != int(allowed[predictor(j)].argmax())
            filled_total += len(filled)
    assert filled_total > 10
    assert differs  # reading row j instead would choose otherwise: the test can fail

    # training: the label of masked token j is scored by the logits row predictor(j)
    collator = PdiffCollator(pdiff_tok, pdiff_vocab, eps=0.999)
    row = {"id": "x", "prompt": "Write something.",
           "text": '<promise topic="a" tokens="1"/><async>Apples are red.</async><sync/>'}
    ex = collator.encode(row)
    masked = [j for j, t in enumerate(ex.input_ids) if t == pdiff_vocab.mask]
    assert masked
    full = collator.layout(row, __import__("random").Random(0))[0]
    for j in masked:
        assert ex.labels[predictor(j) + 1] == full[j] and ex.kinds[predictor(j) + 1] == 2


def test_equal_chunks_unmask_one_token_per_chunk_per_step(rt, pdiff_tok, pdiff_vocab):
    _, res = _decode(rt, pdiff_tok, EQUAL, steps_ratio=1.0)
    (a, b) = res.chunks
    assert a.slots == b.slots == 10 and a.steps == b.steps == 8 == res.denoise_passes
    masks = [[sum(t == pdiff_vocab.mask for t in step[k][0]) for step in res.steps]
             for k in (0, 1)]
    for per_chunk in masks:
        assert per_chunk == list(range(8, 0, -1))  # one fewer mask after every step


def test_deferred_pads_are_unmasked_only_after_the_other_slots(rt, pdiff_tok, pdiff_vocab):
    """With pads boosted on half the rows, a step never commits a pad while a slot whose
    token is not a pad stays masked (and without the option it does)."""
    step = rt.forward
    original = step.__call__
    pad = pdiff_vocab.pad

    class PadHeavy:
        def __call__(self, *args, **kwargs):
            logits = original(*args, **kwargs)
            logits[::2, pad] += 100.0  # every other row: a certain pad
            return logits

        def __getattr__(self, name):
            return getattr(step, name)

    rt.forward = PadHeavy()
    banned = rt.masks()["chunk"]

    def violations(res):
        count = 0
        for first, after in zip(res.steps, res.steps[1:]):
            for k, (tokens, rows) in first.items():
                if k not in after:
                    continue
                allowed = rows.masked_fill(banned[: rows.shape[-1]], float("-inf"))
                masked = [j for j, t in enumerate(tokens) if t == pdiff_vocab.mask]
                chosen = {j: int(allowed[predictor(j)].argmax()) for j in masked}
                now = after[k][0]
                padded = any(now[j] in pdiff_vocab.pads for j in masked)
                waiting = any(now[j] == pdiff_vocab.mask and chosen[j] not in pdiff_vocab.pads
                              for j in masked)
                count += padded and waiting
        return count

    _, deferred = _decode(rt, pdiff_tok, EQUAL, defer_pads=True)
    _, plain = _decode(rt, pdiff_tok, EQUAL)
    assert violations(deferred) == 0 and violations(plain) > 0


def test_steps_ratio_halves_the_steps(rt, pdiff_tok):
    _, res = _decode(rt, pdiff_tok, EQUAL, steps_ratio=0.5)
    assert res.denoise_passes == 4


def test_finished_chunks_are_not_recomputed_and_their_final_kv_is_exact(rt, pdiff_model,
                                                                         pdiff_tok, pdiff_vocab):
    from transformers import DynamicCache

    spy = Spy(rt)
    prompt, res = _decode(rt, pdiff_tok, PLAN)
    short, long = res.chunks
    assert short.steps == 8 and long.steps == 18
    seq = prompt + res.ids
    starts = [i for i, t in enumerate(seq) if t == pdiff_vocab.async_open]
    short_slots = set(res.slots[starts[0]:starts[0] + short.slots])
    fed = [i for i, (index, _, _) in enumerate(spy.calls) if short_slots & set(index)]
    # 8 denoising passes, then none while the long chunk goes on (10 more), then the pass
    # that writes every chunk's final KV with <sync/>
    assert len(fed) == 9 and fed[8] - fed[7] == 11
    sync_slot = res.slots[len(prompt) + res.ids.index(pdiff_vocab.sync)]
    assert sync_slot in spy.calls[fed[8]][0]

    s = structure(seq, pdiff_vocab)
    cache = DynamicCache()
    with torch.no_grad():
        pdiff_model(input_ids=torch.tensor([seq]), position_ids=s.position_ids[None],
                    attention_mask=s.visible[None, None], past_key_values=cache, use_cache=True)
    chunk_rows = [i for i in range(len(seq)) if s.attrs["thread"][i] > 0]
    pool_slots = torch.tensor([res.slots[i] for i in chunk_rows])
    for layer, pooled in zip(cache.layers, rt.forward.cache.layers):
        plain_k = layer.keys[0][:, chunk_rows]
        plain_v = layer.values[0][:, chunk_rows]
        assert (pooled.keys[0][:, pool_slots] - plain_k).abs().max() < 1e-4
        assert (pooled.values[0][:, pool_slots] - plain_v).abs().max() < 1e-4


def test_no_control_token_or_eos_is_sampled_inside_a_chunk(rt, pdiff_tok, pdiff_vocab):
    banned = list(pdiff_vocab.chunk_banned_ids)
    step = rt.forward
    original = step.__call__

    class Biased:
        def __call__(self, *args, **kwargs):
            logits = original(*args, **kwargs)
            logits[:, banned] += 100.0  # every control token and EOS far above the rest
            return logits

        def __getattr__(self, name):
            return getattr(step, name)

    rt.forward = Biased()
    _, res = _decode(rt, pdiff_tok, PLAN)
    seq = res.ids
    s = structure(seq, pdiff_vocab)
    inner = [t for i, t in enumerate(seq) if s.attrs["diffusable"][i]]
    assert inner and not set(inner) & set(banned)


@pytest.mark.parametrize("plan,flag", [
    ('Start <promise topic="never closed', None),  # the answer ends inside a topic
    ('" tokens="2"/> stray closer <sync/> on', None),  # a closer with no promise
    ('<sync/> nothing planned <sync/>', None),
    ('<async> tags </async> in main', None),
    ('<promise topic="huge" tokens="64"/><sync/>', MAX_NEW_TOKENS),  # 640 slots > budget
    ('<promise topic="a" tokens="1"/> and it ends', None),  # chunks, then the end
])
def test_malformed_plans_end_cleanly(rt, pdiff_tok, plan, flag):
    _, res = _decode(rt, pdiff_tok, plan)
    assert isinstance(pdiff_tok.decode(res.ids), str)
    if flag:
        assert flag in res.flags
    # chunks laid out are complete: <async>, slots, </async>, nothing masked left
    assert all(r.slots >= 3 for r in res.chunks)


def test_the_token_cap_keeps_the_room_of_promised_chunks(rt, pdiff_tok, pdiff_vocab):
    """A plan that never syncs runs into max_new_tokens: the answer ends there, with every
    promise's chunk denoised inside the budget (valid Pasta-Lang), flagged."""
    from solm.core.pasta_lang import validate

    plan = " ".join(f'<promise topic="p{i}" tokens="1"/> and' for i in range(30))
    prompt = text_ids(pdiff_tok, "Write something.")
    res = rt.generate(prompt, PdiffDecodeConfig(max_new_tokens=150), script=text_ids(pdiff_tok,
                                                                                    plan))
    assert MAX_NEW_TOKENS in res.flags and len(res.chunks) >= 2
    assert len(res.ids) <= 150 and all(r.slots == 10 for r in res.chunks)
    text = pdiff_tok.decode([t for t in res.ids if t not in pdiff_vocab.pads])
    assert not validate(text)


def test_a_runaway_continuation_stops_at_its_cap(rt, pdiff_tok):
    _, res = _decode(rt, pdiff_tok, PLAN + " and on and on and on and on", max_continuation=3)
    assert CONTINUATION_CAP in res.flags
    sync = res.ids.index(rt.vocab.sync)
    assert len(res.ids) - sync - 1 == 3
    # a <sync/> with nothing promised starts the count too
    _, res = _decode(rt, pdiff_tok, "Intro<sync/> and on and on and on and on",
                     max_continuation=3)
    assert CONTINUATION_CAP in res.flags
    assert len(res.ids) - res.ids.index(rt.vocab.sync) - 1 == 3


@pytest.fixture()
def sharp_rt(pdiff_model, pdiff_tok):
    """The tiny model with logits 10x sharper: its near-uniform rows tie the slots' entropies
    to 1e-7, so which slot commits first flipped on float noise (solo against batched: on
    an Intel Xeon after 1 of 18 steps); sharper rows keep the decodes on the same tokens."""
    import copy

    model = copy.deepcopy(pdiff_model)
    with torch.no_grad():
        model.model.norm.weight.mul_(10.0)
    return PdiffRuntime(model, pdiff_tok, pool_size=1024, max_batch=4)


def test_a_batch_reads_for_each_prompt_the_logits_it_gets_alone(sharp_rt, pdiff_tok):
    """Chunks of one request and main tokens of another share each pass; every request's
    denoising logits equal its solo decode's (fp32, < 1e-4) for as long as the two decodes
    hold the same tokens (a near-tie may still flip a token after that)."""
    rt = sharp_rt
    config = PdiffDecodeConfig(max_new_tokens=120, record=True)
    plans = [PLAN, EQUAL, "No plan at all, just a few words."]
    prompts = [text_ids(pdiff_tok, p) for p in ("One.", "Two, longer prompt.", "Three")]
    alone = [rt.generate(p, config, script=text_ids(pdiff_tok, s))
             for p, s in zip(prompts, plans)]
    together = {rid: res for rid, res, _ in rt.run(
        PdiffRequest(i, p, config, text_ids(pdiff_tok, s))
        for i, (p, s) in enumerate(zip(prompts, plans)))}
    compared = 0
    for i in range(3):
        a, b = alone[i], together[i]
        assert len(a.chunks) == len(b.chunks) and a.denoise_passes == b.denoise_passes
        for sa, sb in zip(a.steps, b.steps):
            if any(sa[k][0] != sb[k][0] for k in sa):
                break
            for k in sa:
                assert (sa[k][1] - sb[k][1]).abs().max() < 1e-4
                compared += 1
    assert compared >= 10


class Perturbed:
    """Wraps the runtime's SlotStep so that chunks meet pads and confident slots: every
    other logits row gets a certain pad, every fourth a confident ordinary token."""

    def __init__(self, rt, pad: int, word: int):
        self.step, self.pad, self.word = rt.forward, pad, word

    def __call__(self, *args, **kwargs):
        logits = self.step(*args, **kwargs)
        logits[::2, self.pad] += 100.0
        logits[1::4, self.word] += 15.0
        return logits

    def __getattr__(self, name):
        return getattr(self.step, name)


def replay_one_step(tokens, rows, allowed_mask, cfg, budget, step, mask_id, pads):
    """The unmasking rule written a second way: what a chunk's slots hold after one step.
    A masked slot j reads row j - 1; it takes its most likely allowed token; slots rank by
    (pad last when deferring, lowest entropy or highest confidence, lowest slot); the first
    ceil(masked / steps left) are kept (all at the last step), plus every slot at least
    `confidence_threshold` confident (not a pad when deferring); with `pads_end_chunk`,
    all are kept when every masked slot takes a pad, the longest tail of slots holding or
    predicting a pad then holds pads, and so does every slot still masked after the first
    pad; a pad put at slot j by either rule is the cycle's (j - where its run starts)-th."""
    pad_set = set(pads)
    masked = [j for j, t in enumerate(tokens) if t == mask_id]
    # one batched softmax, as the sampler does, so that near-ties round the same way
    probs = torch.softmax(rows[[j - 1 for j in masked]].float().masked_fill(
        ~allowed_mask, float("-inf")), -1)
    entropy = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)
    info = {}
    for n, j in enumerate(masked):
        token = int(probs[n].argmax())
        info[j] = (token, float(probs[n, token]), float(entropy[n]))

    def rank_key(j):
        token, conf, ent = info[j]
        return (cfg.defer_pads and token in pad_set, ent if cfg.order == "entropy" else -conf, j)

    left = budget - step
    k = len(masked) if left <= 1 else -(-len(masked) // left)
    if cfg.pads_end_chunk and all(info[j][0] in pad_set for j in masked):
        k = len(masked)  # only pads left: all of them now
    kept = {j for j in masked if sum(rank_key(i) < rank_key(j) for i in masked) < k}
    if cfg.confidence_threshold is not None:
        kept |= {j for j in masked if info[j][1] >= cfg.confidence_threshold
                 and not (cfg.defer_pads and info[j][0] in pad_set)}
    after = [info[j][0] if j in kept else t for j, t in enumerate(tokens)]
    if cfg.pads_end_chunk:  # the longest tail (between the tags) of pads, held or predicted
        inner = range(1, len(after) - 1)
        tail = list(itertools.takewhile(
            lambda j: after[j] in pad_set or (after[j] == mask_id and info[j][0] in pad_set),
            reversed(inner)))
        after = [pads[(j - min(tail)) % len(pads)] if j in tail and t == mask_id else t
                 for j, t in enumerate(after)]
    if cfg.pads_end_chunk:  # the first pad between the tags ends the chunk
        ends = [j for j in range(1, len(after) - 1) if after[j] in pad_set]
        if ends:
            after = [pads[(j - ends[0]) % len(pads)] if j > ends[0] and t == mask_id else t
                     for j, t in enumerate(after)]
    return after


@pytest.mark.parametrize("options", [
    {}, {"order": "confidence"}, {"steps_ratio": 0.5}, {"steps_ratio": 0.3, "order": "confidence"},
    {"confidence_threshold": 0.5}, {"confidence_threshold": 0.5, "defer_pads": True},
    {"defer_pads": True}, {"length_scale": 1.5}, {"length_scale": 0.5, "steps_ratio": 0.5},
    {"pads_end_chunk": False}, {"pads_end_chunk": False, "confidence_threshold": 0.5},
    {"pads_end_chunk": False, "defer_pads": True}],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults")
def test_every_denoising_step_follows_the_unmasking_rule(rt, pdiff_tok, pdiff_vocab, options):
    """Each recorded step, replayed by the rule written a second way, gives the tokens the
    next step feeds (and the final chunk); chunk sizes follow 10 N x length scale, and the
    steps a chunk takes follow ceil(masked x steps ratio) unless confident slots end it early."""
    word = text_ids(pdiff_tok, " the")[0]
    rt.forward = Perturbed(rt, pdiff_vocab.pad, word)
    fed_steps, saw_threshold_jump = replay_every_step(rt, pdiff_tok, pdiff_vocab, options)
    cfg = PdiffDecodeConfig(**{"steps_ratio": 1.0, **options})
    if cfg.confidence_threshold is None and not cfg.pads_end_chunk:
        assert all(n == b for n, b in fed_steps)
    if cfg.confidence_threshold is not None:
        assert saw_threshold_jump  # the perturbation makes confident slots: the rule is used


class TailPads:
    """Wraps the runtime's SlotStep so that every chunk's first slots are certain words and
    its last half likely (not certain) pads: the model's way of ending a short chunk."""

    def __init__(self, rt, vocab, word: int):
        self.step, self.vocab, self.word = rt.forward, vocab, word

    def __call__(self, tokens, *args, **kwargs):
        logits = self.step(tokens, *args, **kwargs)
        opens = [i for i, t in enumerate(tokens) if t == self.vocab.async_open]
        for a in opens:
            b = next(i for i in range(a, len(tokens)) if tokens[i] == self.vocab.async_close)
            mid = (a + b) // 2  # rows a..b-1 predict slots a+1..b
            logits[a:mid, self.word] += 100.0
            logits[mid:b - 1, self.vocab.pad] += 12.0
        return logits

    def __getattr__(self, name):
        return getattr(self.step, name)


@pytest.mark.parametrize("options", [{}, {"steps_ratio": 0.5}, {"pads_end_chunk": False}],
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults")
def test_a_predicted_tail_of_pads_ends_the_chunk_without_more_passes(rt, pdiff_tok,
                                                                      pdiff_vocab, options):
    """A chunk whose last half predicts pads: with pads ending chunks (default) the tail takes
    its pads in the first step and the chunk needs only its words' steps; without, every slot
    waits its turn (the steps ratio's full schedule)."""
    word = text_ids(pdiff_tok, " the")[0]
    rt.forward = TailPads(rt, pdiff_vocab, word)
    fed_steps, _ = replay_every_step(rt, pdiff_tok, pdiff_vocab, options)
    cfg = PdiffDecodeConfig(**{"steps_ratio": 1.0, **options})
    for n, budget in fed_steps:
        if cfg.pads_end_chunk:
            assert n < budget
        else:
            assert n == budget


def replay_every_step(rt, pdiff_tok, pdiff_vocab, options):
    """Decode PLAN with `options`, replay each chunk's steps by `replay_one_step`; returns
    [(steps the chunk took, its first budget)] and whether a step committed more slots than
    its schedule."""
    allowed = ~rt.masks()["chunk"]
    _, res = _decode(rt, pdiff_tok, PLAN, **options)
    cfg = PdiffDecodeConfig(**{"steps_ratio": 1.0, **options})
    scale = cfg.length_scale
    first = {k: toks for k, (toks, _) in res.steps[0].items()}
    assert sorted(len(t) for t in first.values()) == sorted(
        max(3, int(round(10 * n * scale))) for n in (1, 2))
    final = {}  # chunk -> its tokens in the answer, by its opening tag's order
    opens = [i for i, t in enumerate(res.ids) if t == pdiff_vocab.async_open]
    for k, start in enumerate(opens):
        final[k] = res.ids[start:start + len(first[k])]
    saw_threshold_jump = False
    fed_steps = []
    for k, tokens in first.items():
        masked0 = sum(t == pdiff_vocab.mask for t in tokens)
        budget = first_budget = max(1, math.ceil(masked0 * cfg.steps_ratio))
        fed = [s[k] for s in res.steps if k in s]
        assert len(fed) <= budget
        for step, (toks, rows) in enumerate(fed):
            want = replay_one_step(toks, rows, allowed[: rows.shape[-1]], cfg, budget, step,
                                   pdiff_vocab.mask, pdiff_vocab.pads)
            got = fed[step + 1][0] if step + 1 < len(fed) else final[k]
            assert got == want, (k, step)
            left = budget - step
            n_masked = sum(t == pdiff_vocab.mask for t in toks)
            scheduled = n_masked if left <= 1 else math.ceil(n_masked / left)
            newly = sum(a == pdiff_vocab.mask and b != pdiff_vocab.mask for a, b in zip(toks, got))
            saw_threshold_jump |= newly > scheduled
            # what is left takes at most the steps a fresh chunk of it would
            still = sum(t == pdiff_vocab.mask for t in want)
            budget = min(budget, step + 1 + math.ceil(still * cfg.steps_ratio))
        fed_steps.append((len(fed), first_budget))
    return fed_steps, saw_threshold_jump


def test_chunk_temperature_samples_and_zero_takes_the_most_likely(rt, pdiff_tok, pdiff_vocab):
    """At a near-zero chunk temperature every committed slot holds its row's most likely
    allowed token; at a high one most do not (tiny random logits are nearly flat)."""
    allowed = ~rt.masks()["chunk"]

    def argmax_share(temperature):
        _, res = _decode(rt, pdiff_tok, PLAN, chunk_temperature=temperature)
        hits = total = 0
        for first, after in zip(res.steps, res.steps[1:] + [None]):
            for k, (toks, rows) in first.items():
                if after is None or k not in after:
                    continue
                for j, (a, b) in enumerate(zip(toks, after[k][0])):
                    if a == pdiff_vocab.mask and b != pdiff_vocab.mask:
                        row = rows[j - 1].float().masked_fill(~allowed[: rows.shape[-1]],
                                                              float("-inf"))
                        hits += b == int(row.argmax())
                        total += 1
        assert total > 5
        return hits / total

    assert argmax_share(1e-4) == 1.0
    assert argmax_share(50.0) < 0.5


def test_chunk_sampling_follows_the_seed(rt, pdiff_tok, pdiff_vocab):
    """Sampled chunks are reproducible from the request's seed and differ between seeds (a
    sampler seeded by a constant gives every seed the same chunks)."""
    from solm.core.sampling import SamplingConfig

    def chunks(seed):
        _, res = _decode(rt, pdiff_tok, PLAN, chunk_temperature=1.0,
                         sampling=SamplingConfig(seed=seed))
        return [t for t in res.ids if t not in pdiff_vocab.pads]

    assert chunks(3) == chunks(3)
    assert chunks(3) != chunks(4)


def test_a_committed_pad_ends_its_chunk_and_saves_the_passes_after_it(rt, pdiff_tok,
                                                                       pdiff_vocab):
    """With certain pads on every other row, the first committed pad ends a chunk: what
    follows it is pads only, and the chunks take fewer denoising passes than without."""
    word = text_ids(pdiff_tok, " the")[0]
    rt.forward = Perturbed(rt, pdiff_vocab.pad, word)
    _, on = _decode(rt, pdiff_tok, PLAN)
    _, off = _decode(rt, pdiff_tok, PLAN, pads_end_chunk=False)
    v = pdiff_vocab
    for res in (on, off):
        assert len(res.chunks) == 2
    opens = [i for i, t in enumerate(on.ids) if t == v.async_open]
    for start in opens:
        inner = on.ids[start + 1:on.ids.index(v.async_close, start)]
        first = next(i for i, t in enumerate(inner) if t in v.pads)
        assert set(inner[first:]) <= set(v.pads)
    assert on.denoise_passes < off.denoise_passes
    assert any(v.pad in off.ids[s + 1:off.ids.index(v.async_close, s)][:-1] and
               not set(off.ids[s + 1:off.ids.index(v.async_close, s)][
                   off.ids[s + 1:].index(v.pad):]) <= set(v.pads)
               for s in [i for i, t in enumerate(off.ids) if t == v.async_open])


class EndsLikeTraining:
    """Wraps the runtime's SlotStep: the k-th chunk's first `lengths[k]` slots are certain
    words; after them, `after_end="pad"`: a certain first pad, then uncertain words;
    `"likely pads"`: every later slot likely (not certainly) the cycle's first pad;
    `"likely cycle"`: each later slot likely the pad training puts there."""

    def __init__(self, rt, vocab, words, lengths, after_end):
        self.step, self.vocab, self.words = rt.forward, vocab, words
        self.lengths, self.after_end = lengths, after_end

    def __call__(self, tokens, *args, **kwargs):
        logits = self.step(tokens, *args, **kwargs)
        opens = [i for i, t in enumerate(tokens) if t == self.vocab.async_open]
        for k, a in enumerate(opens):
            b = next(i for i in range(a, len(tokens)) if tokens[i] == self.vocab.async_close)
            n = self.lengths[k]
            for slot in range(a + 1, b):  # row slot - 1 predicts slot
                i = slot - a  # 1.. inside the chunk
                if i <= n:
                    logits[slot - 1, self.words[0]] += 100.0
                elif self.after_end == "pad" and i == n + 1:
                    logits[slot - 1, self.vocab.pad] += 100.0
                elif self.after_end == "pad":
                    logits[slot - 1, self.words[1]] += 2.0
                elif self.after_end == "likely cycle":
                    logits[slot - 1, self.vocab.pad_for(i - n - 1)] += 12.0
                else:
                    logits[slot - 1, self.vocab.pad] += 12.0
        return logits

    def __getattr__(self, name):
        return getattr(self.step, name)


@pytest.mark.parametrize("after_end", ["pad", "likely pads", "likely cycle"])
@pytest.mark.parametrize("pads_end_chunk", [True, False])
def test_a_chunks_end_is_laid_out_as_training_lays_it(rt, pdiff_tok, pdiff_vocab, after_end,
                                                      pads_end_chunk):
    """A model that writes a chunk's content and then ends it (one certain pad, or a tail of
    likely pads): the sampler's pads after the end are the pad cycle exactly as `to_slots`
    (training's layout) puts them after that content. Without the end rules the words after
    a certain pad stay, and likely pads are the model's one pad (so the agreement is the
    rules' work, not the model's)."""
    from solm.core.systems.pdiff import to_slots

    v = pdiff_vocab
    words = text_ids(pdiff_tok, " the cat")
    lengths = [3, 4]  # PLAN's chunks hold 10 and 20 slots
    rt.forward = EndsLikeTraining(rt, v, words, lengths, after_end)
    _, res = _decode(rt, pdiff_tok, PLAN, pads_end_chunk=pads_end_chunk)
    opens = [i for i, t in enumerate(res.ids) if t == v.async_open]
    assert len(opens) == 2
    for k, (start, tens) in enumerate(zip(opens, (1, 2))):
        got = res.ids[start:res.ids.index(v.async_close, start) + 1]
        laid = to_slots([v.close_for(tens), v.async_open, *[words[0]] * lengths[k],
                         v.async_close], v)
        assert laid[0] == v.close_for(tens) and len(laid) == 10 * tens + 1
        if pads_end_chunk:
            assert got == laid[1:]
        elif after_end == "pad":
            assert words[1] in got  # the words after the end stay
        elif after_end == "likely pads":
            assert set(got[1 + lengths[k]:-1]) == {v.pad}  # the model's pads: no cycle
        if after_end != "pad":  # a likely tail of pads (any of the cycle) commits at once:
            # one step per content slot, against one per slot without the end rules
            assert res.chunks[k].steps == (lengths[k] if pads_end_chunk else 10 * tens - 2)
    names = pdiff_tok.convert_ids_to_tokens(res.ids[opens[1]:])
    assert "<|pdiff_pad_6|>" in names or not pads_end_chunk


@pytest.mark.parametrize("plan,ratio", [(PLAN, 0.5), (EQUAL, 1.0)])
def test_chunk_reports_recount_the_chunks_in_the_answer(rt, pdiff_tok, pdiff_vocab, plan,
                                                        ratio):
    """Each chunk's report, recounted from the answer's ids: the span from <async> to its
    </async>, the pads and the content between them (masks left are neither)."""
    _, res = _decode(rt, pdiff_tok, plan, steps_ratio=ratio)
    ids, spans, i = res.ids, [], 0
    while pdiff_vocab.async_open in ids[i:]:
        a = ids.index(pdiff_vocab.async_open, i)
        b = ids.index(pdiff_vocab.async_close, a)
        spans.append(ids[a:b + 1])
        i = b + 1
    assert len(spans) == len(res.chunks) == 2
    pads = set(pdiff_vocab.pads)
    for span, report in zip(spans, res.chunks):
        body = span[1:-1]
        n_pads = sum(t in pads for t in body)
        n_content = len(body) - n_pads - body.count(pdiff_vocab.mask)
        assert (report.slots, report.pads, report.content_tokens, report.pad_only) == \
            (len(span), n_pads, n_content, n_content == 0)


@pytest.mark.parametrize("text,degenerate", [
    (",,,,,,", True), ("can can", True), ("the the the cat", True), ("", True),
    ("1. 2. 3.", True), ("Paris.", False), ("Sleep eight hours, every night.", False),
    ("the cat and the dog", False), ("Eat greens; eat fruit; walk.", False)])
def test_a_chunk_that_keeps_no_promise_is_degenerate(text, degenerate):
    from solm.decode.pdiff.decode_file import degenerate_chunk

    assert degenerate_chunk(text) == degenerate


def test_an_answer_with_a_degenerate_chunk_is_not_well_formed(pdiff_model, pdiff_tok):
    """The row's well-formedness is the tags' validity and every chunk's content: a chunk of
    commas (a scripted plan whose chunks the tiny model fills as it likes, then forced)."""
    from solm.core.records import Record
    from solm.decode.pdiff.decode_file import degenerate_chunk, result_record

    rt = PdiffRuntime(pdiff_model, pdiff_tok, pool_size=1024)
    cfg = PdiffDecodeConfig(max_new_tokens=200)
    plan = text_ids(pdiff_tok, 'A <promise topic="a" tokens="1"/> b<sync/> end.')
    res = rt.generate(text_ids(pdiff_tok, "Write."), cfg, script=plan)
    v = rt.vocab
    start = res.ids.index(v.async_open)
    end = res.ids.index(v.async_close, start)
    comma = text_ids(pdiff_tok, ",")[0]
    for fill, bad in (([comma] * (end - start - 1), True),
                      (text_ids(pdiff_tok, " Sleep well every night.") , False)):
        ids = list(res.ids)
        inner = (fill + [v.pad] * (end - start - 1))[:end - start - 1]
        ids[start + 1:end] = inner
        row = result_record(rt, Record("r", "Write."), dataclasses.replace(res, ids=ids), cfg)
        assert row["degenerate_chunks"] == int(bad) and row["well_formed"] is (not bad)


def _pad_loving(model, vocab, boost: float):
    """A copy of `model` whose output head favours the first pad by `boost` logits."""
    import copy

    m = copy.deepcopy(model)
    with torch.no_grad():
        head = m.get_output_embeddings()
        bias = torch.zeros(head.weight.shape[0])
        bias[vocab.pad] = boost
        head.bias = torch.nn.Parameter(bias)
    return m


@pytest.mark.parametrize("fill", [0.0, 0.4, 0.75])
def test_min_fill_keeps_pads_out_of_a_chunks_first_share(pdiff_model, pdiff_tok, fill):
    """A model that would pad every slot: with `min_fill` f, each chunk's first ceil(f x
    content slots) hold no pad and (pads ending the chunk) every slot after them a pad."""
    vocab = PdiffRuntime(pdiff_model, pdiff_tok).vocab
    rt = PdiffRuntime(_pad_loving(pdiff_model, vocab, 30.0), pdiff_tok, pool_size=1024)
    plan = text_ids(pdiff_tok, 'A <promise topic="a" tokens="2"/> b <promise topic="b" '
                               'tokens="3"/><sync/> end.')
    res = rt.generate(text_ids(pdiff_tok, "Write."),
                      PdiffDecodeConfig(max_new_tokens=200, min_fill=fill), script=plan)
    v = rt.vocab
    for start in [i for i, t in enumerate(res.ids) if t == v.async_open]:
        end = res.ids.index(v.async_close, start)
        content = res.ids[start + 1:end]
        floor = math.ceil(fill * len(content))
        assert not set(content[:floor]) & set(v.pads)
        assert all(t in v.pads for t in content[floor:])


def test_pad_confidence_commits_only_the_pads_the_model_is_sure_of(pdiff_model, pdiff_tok):
    """Pads favoured by 3 logits (likely, not certain): at a threshold above their
    probability no pad is committed; without one, the chunks are pads."""
    vocab = PdiffRuntime(pdiff_model, pdiff_tok).vocab
    rt = PdiffRuntime(_pad_loving(pdiff_model, vocab, 6.0), pdiff_tok, pool_size=1024)
    plan = text_ids(pdiff_tok, 'A <promise topic="a" tokens="2"/><sync/> end.')
    prompt = text_ids(pdiff_tok, "Write.")
    v = rt.vocab

    def chunk(cfg):
        ids = rt.generate(prompt, cfg, script=plan).ids
        start = ids.index(v.async_open)
        return ids[start + 1:ids.index(v.async_close, start)]

    free = chunk(PdiffDecodeConfig(max_new_tokens=100))
    assert sum(t in v.pads for t in free) > len(free) / 2
    sure = chunk(PdiffDecodeConfig(max_new_tokens=100, pad_confidence=0.9999))
    assert not set(sure) & set(v.pads)
