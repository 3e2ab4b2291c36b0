"""Planned Diffusion's two-copy training layout (BD3-LM's): the masks against the rule written
a second way over random plans, block sizes and chunk counts; every block of every chunk
carrying loss in one pass (a recount); the predictor rows; the sampler's passes against a
two-copy training forward on the same state; the masking band; the AR soft target."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from solm.core.chat import text_ids
from solm.core.systems.pdiff import (PdiffVocab, structure, to_slots, two_copy,
                                     two_copy_predictors)
from solm.decode.pdiff.runtime import PdiffDecodeConfig, PdiffRuntime
from solm.train.pdiff_sft import AR, DIFFUSION, PdiffCollator, pdiff_loss, soft_cross_entropy

WORDS = ["red", "blue", "sky", "sea", "tree", "stone", "rain"]


def blocked(vocab: PdiffVocab, size: int) -> PdiffVocab:
    return dataclasses.replace(vocab, block_size=size)


def random_answer(rng: random.Random, tok, vocab: PdiffVocab) -> list[int]:
    """Plain text, one or two rounds of 1-3 chunks of random lengths, in the slot layout."""
    parts = ["Start."]
    for _ in range(rng.randint(1, 2)):
        for c in range(rng.randint(1, 3)):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 28)))
            parts.append(f'<promise topic="t{c}" tokens="1"/><async> {words}</async>')
        parts.append("<sync/> Then.")
    return to_slots(text_ids(tok, "".join(parts)), vocab, lambda: rng.randint(0, 3))


def chunks_of(ids: list[int], vocab: PdiffVocab) -> list[list[int]]:
    """Each chunk's rows, `<async>` to `</async>`, read off the tokens."""
    out, i = [], 0
    while i < len(ids):
        if ids[i] == vocab.async_open and i and ids[i - 1] in vocab.close_tens:
            end = ids.index(vocab.async_close, i)
            out.append(list(range(i, end + 1)))
            i = end + 1
        else:
            i += 1
    return out


def blocks_by_hand(n_slots: int, size: int) -> list[int]:
    """A chunk's slots' blocks, counted out: `<async>` and the first `size` content slots
    block 0, then `size` more a block; `</async>` with the slot before it."""
    if size == 0:
        return [0] * n_slots
    return [0] + [(j - 1) // size for j in range(1, n_slots - 1)] + [(n_slots - 3) // size]


def oracle(ids: list[int], vocab: PdiffVocab, size: int) -> torch.Tensor:
    """The two-copy mask written from the one-copy rule: clean rows as the one-copy mask;
    a noised copy of slot a sees the noised copy of slot b when both lie in the same block
    of one chunk, the clean slot b of its own chunk when b's block is earlier, and any other
    clean row r when the one-copy mask lets a see r."""
    one = structure(ids, vocab).visible
    chunks = chunks_of(ids, vocab)
    copies = [j for c in chunks for j in c]
    chunk_of = {j: ci for ci, c in enumerate(chunks) for j in c}
    block = {j: b for c in chunks for j, b in zip(c, blocks_by_hand(len(c), size))}
    n, m = len(ids), len(copies)
    out = torch.zeros(n + m, n + m, dtype=torch.bool)
    out[:n, :n] = one
    for x, a in enumerate(copies):
        for y, b in enumerate(copies):
            out[n + x, n + y] = chunk_of[a] == chunk_of[b] and block[a] == block[b]
        for r in range(n):
            if chunk_of.get(r) == chunk_of[a]:
                out[n + x, r] = block[r] < block[a]
            else:
                out[n + x, r] = bool(one[a, r])
    return out


@pytest.mark.parametrize("seed", range(10))
def test_two_copy_masks_equal_the_rule_written_from_the_one_copy_mask(seed, pdiff_tok,
                                                                      pdiff_vocab):
    rng = random.Random(seed)
    size = rng.choice([0, 1, 3, 4, 8])
    vocab = blocked(pdiff_vocab, size)
    ids = random_answer(rng, pdiff_tok, vocab)
    s = two_copy(ids, vocab)
    assert torch.equal(s.visible, oracle(ids, vocab, size))
    n = len(ids)
    copies = [j for c in chunks_of(ids, vocab) for j in c]
    assert s.attrs["source"][n:].tolist() == copies
    assert torch.equal(s.position_ids[n:], structure(ids, vocab).position_ids[copies])


@pytest.mark.parametrize("size", [0, 2, 4])
def test_every_noised_slot_is_predicted_by_the_row_the_sampler_reads(size, pdiff_tok,
                                                                     pdiff_vocab):
    """A block's first slot from the clean slot before it (the finished block's last row);
    every other slot, and block 0's first content slot, from the noised slot before it."""
    vocab = blocked(pdiff_vocab, size)
    ids = random_answer(random.Random(size), pdiff_tok, vocab)
    s = two_copy(ids, vocab)
    rows = two_copy_predictors(s).tolist()
    n = len(ids)
    for x in range(n, len(rows)):
        a = int(s.attrs["source"][x])
        order = int(s.attrs["order"][x])
        if order == 0:
            continue  # `<async>`: never masked
        first_of_block = size and order > 1 and (order - 1) % size == 0 \
            and ids[a] != vocab.async_close
        assert rows[x] == (a - 1 if first_of_block else x - 1), (x, order)
    assert all(r == -1 for r in rows[:n])


@pytest.mark.parametrize("size", [0, 3, 5])
def test_every_block_of_every_chunk_carries_loss_in_one_pass(size, pdiff_tok, pdiff_vocab):
    """Masking rate near 1: in one encoded example every diffusable slot of every block of
    every chunk has a DIFFUSION label, counted 1/t once (recounted from the tokens), and
    the normaliser is the AR targets plus every diffusable slot."""
    vocab = blocked(pdiff_vocab, size)
    collator = PdiffCollator(pdiff_tok, vocab, eps=0.9999, extra_pads=0, copy_layout="two-copy")
    row = {"id": "r", "prompt": "Write.",
           "text": 'A <promise topic="a" tokens="2"/><async> one two three four five six seven '
                   'eight nine ten</async> and <promise topic="b" tokens="1"/><async> x y'
                   '</async><sync/> end.'}
    ex = collator.encode(row, random.Random(0))
    ids, prompt_len = collator.layout(row, random.Random(0))
    chunks = chunks_of(ids, vocab)
    s = two_copy(ids, vocab)
    rows = two_copy_predictors(s).tolist()
    n = len(ids)
    labelled = {x for x in range(n, len(rows)) if ex.kinds[rows[x] + 1] == DIFFUSION}
    for c in chunks:
        blocks = blocks_by_hand(len(c), size)
        content = [j for j in c if ids[j] not in (vocab.async_open, vocab.async_close)]
        copies = {int(a): x for x, a in enumerate(s.attrs["source"].tolist()) if x >= n}
        assert {copies[j] for j in content} <= labelled
        assert {blocks[c.index(j)] for j in content} == set(range(max(blocks) + 1))
    ar = sum(k == AR for k in ex.kinds)
    assert ex.norm == ar + sum(len(c) - 2 for c in chunks)
    assert sum(k == DIFFUSION for k in ex.kinds) == sum(len(c) - 2 for c in chunks)
    assert all(ex.input_ids[x] == vocab.mask for x in labelled)
    assert ex.input_ids[:n] == ids  # the clean copy is never masked


def test_the_masking_rate_stays_in_its_band(pdiff_tok, pdiff_vocab):
    collator = PdiffCollator(pdiff_tok, pdiff_vocab, eps=0.3, mask_max=0.8, extra_pads=0,
                             copy_layout="two-copy")
    row = {"id": "r", "prompt": "Write.",
           "text": 'A <promise topic="a" tokens="1"/><async> one two</async><sync/> end.'}
    ts = [collator.encode(row, random.Random(k)).t for k in range(200)]
    assert 0.3 <= min(ts) < 0.35 and 0.75 < max(ts) <= 0.8


@pytest.fixture()
def block_model(pdiff_model, monkeypatch):
    def with_blocks(size: int):
        monkeypatch.setattr(pdiff_model.config, "solm_block_size", size, raising=False)
        return pdiff_model
    return with_blocks


@pytest.mark.parametrize("size", [0, 4])
def test_each_denoising_pass_computes_what_the_two_copy_forward_does(block_model, pdiff_tok,
                                                                     pdiff_vocab, size):
    """Per recorded pass, per chunk: the rows the sampler computed for its current block
    equal the two-copy training forward's rows of that block's noised copy, the noised copy
    holding the pass's state and the clean copy the finished answer."""
    model = block_model(size)
    vocab = blocked(pdiff_vocab, size)
    rt = PdiffRuntime(model, pdiff_tok, pool_size=1024, max_batch=2)
    plan = text_ids(pdiff_tok, 'Intro <promise topic="a" tokens="2"/> and <promise topic="b" '
                               'tokens="3"/><sync/> end.')
    prompt = text_ids(pdiff_tok, "Write something.")
    res = rt.generate(prompt, PdiffDecodeConfig(max_new_tokens=300, record=True,
                                                steps_ratio=1.0), script=plan)
    seq = prompt + res.ids
    s = two_copy(seq, vocab)
    n = len(seq)
    copy_of = {int(a): x for x, a in enumerate(s.attrs["source"].tolist()) if x >= n}
    starts = [i for i, t in enumerate(seq) if t == vocab.async_open]
    checked = 0
    for step in res.steps:
        state = [seq[int(a)] for a in s.attrs["source"]]
        for k, (tokens, _) in step.items():
            for j, tok in enumerate(tokens):
                state[copy_of[starts[k] + j]] = tok
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([state]), position_ids=s.position_ids[None],
                           attention_mask=s.visible[None, None]).logits[0]
        for k, (tokens, rows) in step.items():
            blocks = s.attrs["block"][[copy_of[starts[k] + j] for j in range(len(tokens))]]
            fed = [j for j in range(len(tokens)) if not torch.isnan(rows[j]).any()]
            current = max(int(blocks[j]) for j in fed)
            here = [j for j in fed if int(blocks[j]) == current]
            want = logits[[copy_of[starts[k] + j] for j in here]]
            assert (rows[here] - want).abs().max() < 1e-4
            checked += 1
    assert checked >= 8


def test_the_soft_target_mixes_the_teachers_distribution_into_the_masked_slots():
    """By hand: where a DIFFUSION label has a soft target, its cross-entropy is (1 - w) CE +
    w x the cross-entropy against the teacher over the vocabulary both know; elsewhere
    unchanged."""
    torch.manual_seed(0)
    v = 11
    logits = torch.randn(1, 5, v)
    labels = torch.tensor([[-100, 3, 4, -100, 2]])
    kinds = torch.tensor([[0, AR, DIFFUSION, 0, DIFFUSION]])
    t, norm = torch.tensor([0.5]), torch.tensor([3.0])
    where = torch.tensor([[False, True, False, False]])  # label 2 (scored by row 1)
    teacher = torch.randn(1, v - 2)  # the teacher lacks the last two (control) tokens
    w = 0.3
    got, _ = pdiff_loss(logits, labels, kinds, t, norm, soft=(where, teacher), soft_weight=w)
    ce = torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], ignore_index=-100,
                                           reduction="none")
    soft = -(torch.softmax(teacher[0], -1) * torch.log_softmax(logits[0, 1], -1)[:v - 2]).sum()
    want = (ce[0] + ((1 - w) * ce[1] + w * soft) / 0.5 + ce[3] / 0.5) / 3.0
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    assert soft_cross_entropy(logits[0, 1:2], teacher).item() == pytest.approx(soft.item())


def test_soft_rows_point_at_the_teachers_row_before_each_content_token(pdiff_tok, pdiff_vocab):
    """The teacher reads the prompt and every content token in order (tags and pads left
    out); the soft row of a masked content slot is the row before that token there."""
    collator = PdiffCollator(pdiff_tok, pdiff_vocab, eps=0.9999, extra_pads=2,
                             copy_layout="two-copy", soft_targets=True)
    row = {"id": "r", "prompt": "Write.",
           "text": 'A <promise topic="a" tokens="1"/><async> one two</async> b<sync/> end.'}
    ex = collator.encode(row, random.Random(0))
    ids, prompt_len = collator.layout(row, random.Random(0))
    assert ex.plain_ids[:prompt_len] == ids[:prompt_len]
    answer = pdiff_tok.decode(ex.plain_ids[prompt_len:], skip_special_tokens=True)
    assert answer.split() == ["A", "one", "two", "b", "end."]
    assert not set(ex.plain_ids) & {*pdiff_vocab.control_ids, *pdiff_vocab.pads}
    s = two_copy(ids, pdiff_vocab)
    rows = two_copy_predictors(s).tolist()
    pads = set(pdiff_vocab.pads)
    for x in range(len(ids), len(rows)):
        label_at = rows[x] + 1
        if ex.kinds[label_at] != DIFFUSION:
            continue
        token = ex.labels[label_at]
        if token in pads:
            assert ex.soft_rows[label_at] == -1
        else:
            assert ex.plain_ids[ex.soft_rows[label_at] + 1] == token
