"""Planned Diffusion's chunk blocks: the masks `structure()` builds against the rule written
a second way, the sampler's passes against a training forward, the training's draw of one
block per chunk against a recount, and a block as long as the chunk being today's decode."""

import dataclasses
import random

import pytest
import torch

from solm.core.chat import text_ids
from solm.core.systems.pdiff import (PdiffVocab, slot_block, structure, to_slots)
from solm.decode.pdiff.runtime import PdiffDecodeConfig, PdiffRuntime

PLAN = ('Intro <promise topic="a" tokens="2"/> and <promise topic="b" tokens="3"/><sync/> '
        'end.')


def blocked(vocab: PdiffVocab, size: int) -> PdiffVocab:
    return dataclasses.replace(vocab, block_size=size)


def random_answer(rng: random.Random, tok, vocab: PdiffVocab) -> list[int]:
    """A prompt-free answer in the slot layout: plain text, 1-3 chunks of random lengths, a
    sync, maybe a second round."""
    parts = ["Start."]
    for _ in range(rng.randint(1, 2)):
        for c in range(rng.randint(1, 3)):
            words = " ".join(rng.choice(["red", "blue", "sky", "sea", "tree"])
                             for _ in range(rng.randint(1, 25)))
            parts.append(f'<promise topic="t{c}" tokens="1"/><async> {words}</async>')
        parts.append("<sync/> Then.")
    ids = text_ids(tok, "".join(parts))
    return to_slots(ids, vocab, lambda: rng.randint(0, 4))


def block_lists(n_slots: int, size: int) -> list[list[int]]:
    """A chunk's blocks as explicit lists, counted out slot by slot: `<async>` and the first
    `size` content slots, then `size` more at a time; `</async>` joins the block of the slot
    before it."""
    if size == 0:
        return [list(range(n_slots))]
    blocks, current = [], [0]
    for j in range(1, n_slots - 1):
        if len(current) == size + (1 if not blocks else 0):
            blocks.append(current)
            current = []
        current.append(j)
    current.append(n_slots - 1)
    blocks.append(current)
    return blocks


@pytest.mark.parametrize("seed", range(6))
def test_block_masks_from_structure_equal_the_rule_written_another_way(seed, pdiff_tok,
                                                                        pdiff_vocab):
    """With blocks, the mask is the whole-chunk mask less what a slot would see of its own
    chunk's later blocks; blocks counted out by hand."""
    rng = random.Random(seed)
    ids = random_answer(rng, pdiff_tok, pdiff_vocab)
    whole = structure(ids, pdiff_vocab)
    thread = whole.attrs["thread"].tolist()
    for size in (1, 2, 3, 5, 8, 1000):
        s = structure(ids, blocked(pdiff_vocab, size))
        assert torch.equal(s.position_ids, whole.position_ids)
        expected = whole.visible.clone()
        for chunk in set(thread) - {0}:
            slots = [i for i, t in enumerate(thread) if t == chunk]
            index = {}
            for b, members in enumerate(block_lists(len(slots), size)):
                index.update({slots[j]: b for j in members})
            for q in slots:
                for k in slots:
                    if index[k] > index[q]:
                        expected[q, k] = False
            assert [index[i] for i in slots] == s.attrs["block"][slots].tolist()
        assert torch.equal(s.visible, expected), size
    assert torch.equal(structure(ids, blocked(pdiff_vocab, 1000)).visible, whole.visible)


@pytest.mark.parametrize("size", [0, 1, 3, 4])
def test_block_masks_equal_the_text_level_oracle(size, pdiff_tok, pdiff_vocab):
    """`structure()` with blocks against the spec read from the tokens' text (`oracles`)."""
    from oracles import pdiff_oracle

    rng = random.Random(size)
    for _ in range(4):
        ids = random_answer(rng, pdiff_tok, pdiff_vocab)
        for layout in ("pred10x", "overlap"):
            vocab = dataclasses.replace(pdiff_vocab, block_size=size, positions=layout)
            visible, positions, _, _ = pdiff_oracle(ids, pdiff_tok, layout, size)
            s = structure(ids, vocab)
            assert torch.equal(s.visible, visible) and s.position_ids.tolist() == positions


def test_slot_blocks_by_hand():
    assert [slot_block(o, 3) for o in range(9)] == [0, 0, 0, 0, 1, 1, 1, 2, 2]
    assert [slot_block(o, 0) for o in range(5)] == [0] * 5


@pytest.fixture()
def block_model(pdiff_model, monkeypatch):
    def with_blocks(size: int):
        monkeypatch.setattr(pdiff_model.config, "solm_block_size", size, raising=False)
        return pdiff_model
    return with_blocks


def _decode(rt, tok, **cfg):
    prompt = text_ids(tok, "Write something.")
    cfg.setdefault("steps_ratio", 1.0)  # one slot a step unless a test says otherwise
    config = PdiffDecodeConfig(max_new_tokens=300, record=True, **cfg)
    return prompt, rt.generate(prompt, config, script=text_ids(tok, PLAN))


def test_block_passes_read_what_a_training_forward_computes(block_model, pdiff_tok, pdiff_vocab):
    """Each pass feeds a chunk's current block (and the block just finished, again); its rows
    equal the training forward of the state at that pass; the chunks' final KV equals a
    whole forward's."""
    from transformers import DynamicCache

    model = block_model(4)
    vocab = blocked(pdiff_vocab, 4)
    rt = PdiffRuntime(model, pdiff_tok, pool_size=1024, max_batch=2)
    assert rt.vocab.block_size == 4
    prompt, res = _decode(rt, pdiff_tok)
    seq = prompt + res.ids
    s = structure(seq, vocab)
    starts = [i for i, t in enumerate(seq) if t == vocab.async_open]
    blocks_of = [s.attrs["block"][st:st + c.slots].tolist() for st, c in zip(starts, res.chunks)]
    checked = 0
    for step in res.steps:
        state = list(seq)
        for k, (tokens, _) in step.items():
            state[starts[k]:starts[k] + len(tokens)] = tokens
        with torch.no_grad():
            s_now = structure(state, vocab)
            logits = model(input_ids=torch.tensor([state]), position_ids=s_now.position_ids[None],
                           attention_mask=s_now.visible[None, None]).logits[0]
        for k, (tokens, rows) in step.items():
            fed = [j for j in range(len(tokens)) if not torch.isnan(rows[j]).any()]
            current = max(blocks_of[k][j] for j in fed)
            whole = [j for j, b in enumerate(blocks_of[k]) if b == current]
            before = [j for j, b in enumerate(blocks_of[k]) if b == current - 1]
            # the current block, with the block just finished (its first pass) or that
            # block's last slot (whose row predicts the current block's first)
            assert fed in (whole, before + whole, before[-1:] + whole), (fed, current)
            expected = logits[starts[k]:starts[k] + len(tokens)][fed]
            assert (rows[fed] - expected).abs().max() < 1e-4
            checked += 1
    assert checked >= 10 and max(max(b) for b in blocks_of) >= 2

    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=torch.tensor([seq]), position_ids=s.position_ids[None],
              attention_mask=s.visible[None, None], past_key_values=cache, use_cache=True)
    chunk_rows = [i for i in range(len(seq)) if s.attrs["thread"][i] > 0]
    pool = torch.tensor([res.slots[i] for i in chunk_rows])
    for layer, pooled in zip(cache.layers, rt.forward.cache.layers):
        assert (pooled.keys[0][:, pool] - layer.keys[0][:, chunk_rows]).abs().max() < 1e-4
        assert (pooled.values[0][:, pool] - layer.values[0][:, chunk_rows]).abs().max() < 1e-4


def test_each_block_takes_its_own_steps(block_model, pdiff_tok):
    """Blocks are denoised one after another, each in ceil(its masked slots x ratio) steps:
    without pads ending a chunk early, a chunk's passes are the sum over its blocks."""
    model = block_model(4)
    rt = PdiffRuntime(model, pdiff_tok, pool_size=1024, max_batch=2)
    _, res = _decode(rt, pdiff_tok, pads_end_chunk=False, steps_ratio=0.5)
    for chunk in res.chunks:
        content = chunk.slots - 2
        blocks = [min(4, content - 4 * b) for b in range((content + 3) // 4)]
        assert chunk.steps == sum(-(-n // 2) for n in blocks)


def test_a_block_as_long_as_the_chunk_is_the_whole_chunk_decode(block_model, pdiff_tok):
    model = block_model(0)
    _, whole = _decode(PdiffRuntime(model, pdiff_tok, pool_size=1024), pdiff_tok)
    model = block_model(1000)
    _, long = _decode(PdiffRuntime(model, pdiff_tok, pool_size=1024), pdiff_tok)
    assert whole.ids == long.ids and whole.forward_passes == long.forward_passes
    model = block_model(2)
    _, small = _decode(PdiffRuntime(model, pdiff_tok, pool_size=1024), pdiff_tok)
    assert small.ids != whole.ids or small.forward_passes != whole.forward_passes


def test_training_masks_one_block_per_chunk_and_counts_it_for_all(pdiff_tok, pdiff_vocab):
    """Per chunk, the masked slots lie in one block, every slot of the chunk before it is
    clean, and each masked slot's label counts the chunk's number of blocks (recounted)."""
    from solm.train.pdiff_sft import DIFFUSION, PdiffCollator

    vocab = blocked(pdiff_vocab, 3)
    collator = PdiffCollator(pdiff_tok, vocab, eps=0.999, extra_pads=0)
    row = {"id": "r", "prompt": "Write.",
           "text": 'A <promise topic="a" tokens="1"/><async> one two three four five six seven'
                   '</async> and <promise topic="b" tokens="1"/><async> eight nine</async>'
                   '<sync/> end.'}
    drawn = {}
    for seed in range(40):
        ex = collator.encode(row, random.Random(seed))
        ids, _ = collator.layout(row, random.Random(0))
        s = structure(ids, vocab)
        thread, block = s.attrs["thread"].tolist(), s.attrs["block"].tolist()
        masked = [j for j, t in enumerate(ex.input_ids) if t == vocab.mask]
        for chunk in {thread[j] for j in masked}:
            mine = [j for j in masked if thread[j] == chunk]
            b = {block[j] for j in mine}
            assert len(b) == 1
            b = b.pop()
            drawn.setdefault(chunk, set()).add(b)
            diffusable = [j for j in range(len(ids)) if thread[j] == chunk
                          and ids[j] not in (vocab.async_open, vocab.async_close)]
            n_blocks = len({block[j] for j in diffusable})
            for j in diffusable:
                if block[j] < b:
                    assert ex.input_ids[j] == ids[j]  # earlier blocks stay clean
            for j in mine:
                assert ex.kinds[j] == DIFFUSION and ex.scale[j] == n_blocks
        assert ex.norm == sum(k == 1 for k in ex.kinds) + sum(
            1 for j in range(len(ids)) if thread[j] > 0
            and ids[j] not in (vocab.async_open, vocab.async_close))
    assert len(drawn[1]) >= 3  # the draw reaches several blocks of the long chunk


@pytest.mark.parametrize("size", [0, 3, 4])
def test_passes_add_up_and_the_join_feeds_only_what_is_not_final(block_model, pdiff_tok, size):
    """Recounted from the plan and the recorded passes: forward passes = plan + denoise +
    join; each denoising pass's fed slots are the rows it computed; the committed slots add
    up to every content slot; the join feeds the slots whose KV still saw masks (a block
    model's last block of each chunk; the whole chunk without blocks) and the `<sync/>`."""
    model = block_model(size)
    rt = PdiffRuntime(model, pdiff_tok, pool_size=1024, max_batch=2)
    widths, call = [], rt.forward.__call__

    def spy(tokens, *args, **kwargs):
        widths.append(len(tokens))
        return call(tokens, *args, **kwargs)

    rt.forward = type("Spy", (), {"__call__": staticmethod(spy),
                                  "release": staticmethod(rt.forward.release),
                                  "cache": rt.forward.cache})()
    _, res = _decode(rt, pdiff_tok)
    assert res.forward_passes == res.plan_passes + res.denoise_passes + res.join_passes
    assert res.join_passes == PLAN.count("<sync/>") == 1
    assert len(widths) == 1 + res.forward_passes  # the prefill, then every pass
    recorded = [sum(int((~torch.isnan(rows).any(-1)).sum()) for _, rows in step.values())
                for step in res.steps]
    assert res.fed_slots == recorded and len(recorded) == res.denoise_passes
    assert sum(res.committed) == sum(c.slots - 2 for c in res.chunks)
    lasts = [block_lists(c.slots, size)[-1] for c in res.chunks]
    join_width = 1 + sum(len(b) for b in lasts)
    n = len(res.fed_slots)  # the denoising passes run back to back; the join comes next
    first = next(i for i in range(len(widths)) if widths[i:i + n] == res.fed_slots)
    assert widths[first + n] == join_width
    if size:
        assert join_width < 1 + sum(c.slots for c in res.chunks)


@pytest.mark.parametrize("size", [0, 3])
def test_every_committed_slot_is_the_training_forwards_choice_at_its_predictor_row(
        block_model, pdiff_tok, pdiff_vocab, size):
    """Greedy, no pad shortcut: each slot a pass commits holds the argmax (chunk tokens
    only) of a training forward's logits, on the state of that pass, at the slot's
    predictor row j - 1. For the first slot of a block that row is the previous block's
    last slot, whose logits the runtime kept from that block's last pass (the edge)."""
    model = block_model(size)
    vocab = blocked(pdiff_vocab, size)
    rt = PdiffRuntime(model, pdiff_tok, pool_size=1024, max_batch=2)
    prompt, res = _decode(rt, pdiff_tok, pads_end_chunk=False)
    banned = rt.masks()["chunk"]
    seq = prompt + res.ids
    starts = [i for i, t in enumerate(seq) if t == vocab.async_open]
    finals = [seq[st:st + c.slots] for st, c in zip(starts, res.chunks)]
    edges = 0
    for n, step in enumerate(res.steps):
        state = list(seq)
        for k, (tokens, _) in step.items():
            state[starts[k]:starts[k] + len(tokens)] = tokens
        with torch.no_grad():
            s_now = structure(state, vocab)
            logits = model(input_ids=torch.tensor([state]), position_ids=s_now.position_ids[None],
                           attention_mask=s_now.visible[None, None]).logits[0]
        for k, (tokens, _) in step.items():
            later = res.steps[n + 1].get(k, (finals[k],))[0] if n + 1 < len(res.steps) \
                else finals[k]
            for j, (now, after) in enumerate(zip(tokens, later)):
                if now != vocab.mask or after == vocab.mask:
                    continue
                row = logits[starts[k] + j - 1][: banned.shape[0]].masked_fill(
                    banned[: logits.shape[-1]], float("-inf"))
                assert after == int(row.argmax()), (n, k, j)
                edges += size > 0 and j > 1 and slot_block(j, size) != slot_block(j - 1, size)
    assert edges >= 2 or size == 0
