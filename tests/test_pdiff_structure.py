"""Planned Diffusion's structure against the rules written a second way (tests/oracles.py)."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles import PLAIN, pdiff_oracle, wellformed_pasta
from solm.core.chat import text_ids
from solm.core.control_tokens import MAX_PROMISE_TENS
from solm.core.pasta_lang import strip
from solm.core.structure import IGNORE
from solm.core.systems import get_system
from solm.core.systems.pdiff import (PdiffTracker, chunk_slots, predictor, structure, to_slots)

ANNOTATED = ('Two points: <promise topic="first" tokens="1"/><async>Apples are red and sweet '
             'fruit.</async> and <promise topic="second" tokens="1"/><async>Pears are green.'
             '</async><sync/> Done.')


def test_registered_with_its_structure_module(pdiff_tok):
    module = get_system("pdiff").structure_module()
    assert module.NAME == "pdiff" and module.structure is structure
    tokens = get_system("pdiff").control_tokens(16)
    assert "<|mdm_mask|>" in tokens and "<|pdiff_pad|>" in tokens


def test_a_model_trained_with_one_pad_keeps_one():
    """A tokenizer that has the single pad (models trained before the pad cycle) gets no
    later pads from `add_control_tokens`, its vocab's pads are that one token and its chunks
    are laid out with it; a fresh tokenizer gets the seven."""
    from solm.core.models import load_tokenizer
    from solm.core.systems.pdiff import PdiffVocab
    from solm.core.vocabulary import add_control_tokens, add_tokens_to_tokenizer
    from solm.core.control_tokens import pasta_tokens

    old = load_tokenizer("smollm2-135m")
    add_tokens_to_tokenizer(old, pasta_tokens() + ["<|mdm_mask|>", "<|pdiff_pad|>"])
    size = len(old)
    assert add_control_tokens(None, old, "pdiff") == 0 and len(old) == size
    v = PdiffVocab.from_tokenizer(old)
    assert v.pads == (old.convert_tokens_to_ids("<|pdiff_pad|>"),)
    laid = to_slots(text_ids(old, ANNOTATED), v)
    assert not any("pdiff_pad_" in t for t in old.convert_ids_to_tokens(laid))
    fresh = load_tokenizer("smollm2-135m")
    assert add_control_tokens(None, fresh, "pdiff") == len(old) - len(load_tokenizer(
        "smollm2-135m")) + 6
    assert len(PdiffVocab.from_tokenizer(fresh).pads) == 7


@pytest.mark.parametrize("layout", ["pred10x", "overlap"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_structure_equals_the_rules_written_again(pdiff_tok, layout, data):
    ids = data.draw(wellformed_pasta(pdiff_tok))
    s = structure(ids, get_system("pdiff").structure_module().Vocab.from_tokenizer(
        pdiff_tok, layout))
    visible, positions, targets, diffusable = pdiff_oracle(ids, pdiff_tok, layout)
    assert torch.equal(s.visible, visible)
    assert s.position_ids.tolist() == positions
    assert s.targets.tolist() == targets
    assert s.attrs["diffusable"].tolist() == [int(d) for d in diffusable]


def _chunks(ids, vocab):
    """(closer index, block tokens from <async> to </async>) of each chunk, read by hand."""
    out = []
    for i, t in enumerate(ids):
        if t in vocab.close_tens and i + 1 < len(ids) and ids[i + 1] == vocab.async_open:
            end = ids.index(vocab.async_close, i + 1)
            out.append((i, ids[i + 1:end + 1]))
    return out


def test_to_slots_gives_every_chunk_exactly_ten_n_slots(pdiff_tok, pdiff_vocab):
    ids = text_ids(pdiff_tok, ANNOTATED)
    before = _chunks(ids, pdiff_vocab)
    extras = iter([10, 0])
    laid = to_slots(ids, pdiff_vocab, extra_pads=lambda: next(extras))
    after = _chunks(laid, pdiff_vocab)
    assert len(after) == len(before) == 2
    for (ci, old), (cj, new), extra in zip(before, after, (10, 0)):
        tens = pdiff_vocab.close_tens[laid[cj]]
        content = old[1:-1]
        assert len(new) == 10 * tens  # <async>, content, pads, </async>
        assert new[1:1 + len(content)] == content
        pads = new[1 + len(content):-1]
        # the pads cycle through the pad tokens, the first right after the content
        names = ["<|pdiff_pad|>"] + [f"<|pdiff_pad_{k}|>" for k in range(1, 7)]
        assert pdiff_tok.convert_ids_to_tokens(pads) == [names[k % 7] for k in range(len(pads))]
        assert len(pads) >= 1 + extra
        # the smallest N that holds content + 1 pad + the extra ones, never below the promise
        need = len(content) + 3 + extra
        assert tens == max(pdiff_vocab.close_tens[ids[ci]], -(-need // 10))
        assert 10 * (tens - 1) < need or tens == pdiff_vocab.close_tens[ids[ci]]
    # with the pads removed, the text is the annotated text with (maybe) larger promises
    text = pdiff_tok.decode([t for t in laid if t not in pdiff_vocab.pads])
    assert strip(text) == strip(ANNOTATED)


def test_to_slots_refuses_a_chunk_beyond_the_largest_promise(pdiff_vocab):
    big = [pdiff_vocab.close_for(1), pdiff_vocab.async_open,
           *[PLAIN[0]] * (10 * MAX_PROMISE_TENS), pdiff_vocab.async_close]
    with pytest.raises(ValueError, match="needs tokens"):
        to_slots(big, pdiff_vocab)


def test_chunk_positions_follow_the_slots_and_the_length_scale(pdiff_tok, pdiff_vocab):
    laid = to_slots(text_ids(pdiff_tok, ANNOTATED), pdiff_vocab,
                    extra_pads=lambda: random.Random(0).randint(0, 10))
    s = structure(laid, pdiff_vocab)
    for ci, block in _chunks(laid, pdiff_vocab):
        start = ci + 1
        pos = s.position_ids[start:start + len(block)].tolist()
        assert pos == list(range(s.position_ids[ci] + 1, s.position_ids[ci] + 1 + len(block)))
        # the next main token continues right after the last slot
        nxt = start + len(block)
        assert s.position_ids[nxt] == s.position_ids[ci] + 1 + len(block)
    # --length-scale: main moves by round(10 N s) after a promise, at least 3
    for scale in (0.5, 1.5, 0.01):
        tracker = PdiffTracker(pdiff_vocab, length_scale=scale)
        a = tracker.main(pdiff_vocab.close_for(3))
        b = tracker.main(PLAIN[0])
        assert b.pos - a.pos == 1 + max(3, round(30 * scale)) == 1 + chunk_slots(3, scale)


def test_chunks_are_bidirectional_hidden_from_siblings_and_from_main_until_sync(pdiff_tok,
                                                                               pdiff_vocab):
    laid = to_slots(text_ids(pdiff_tok, ANNOTATED), pdiff_vocab)
    s = structure(laid, pdiff_vocab)
    (c1, b1), (c2, b2) = _chunks(laid, pdiff_vocab)
    one = range(c1 + 1, c1 + 1 + len(b1))
    two = range(c2 + 1, c2 + 1 + len(b2))
    sync = laid.index(pdiff_vocab.sync)
    assert s.visible[one.start][one.stop - 1]  # first slot sees the last: bidirectional
    assert not s.visible[two.start][one.start]  # not its sibling
    assert not s.visible[c2][one.start]  # main before the sync does not see the chunk
    assert s.visible[sync][one.start] and s.visible[sync][two.stop - 1]
    assert not s.visible[two.start][c2 + len(b2) + 1]  # nor later main tokens
    # chunk tokens predict nothing autoregressively; their tags are not diffused
    assert all(s.targets[i] == IGNORE for i in [*one, *two])
    assert s.attrs["diffusable"][one.start] == 0 and s.attrs["diffusable"][one.stop - 1] == 0
    assert s.attrs["diffusable"][one.start + 1:one.stop - 1].all()
    # the promise predicts the first main token after its chunk (PASTA's rule)
    assert s.targets[c1] == laid[one.stop]


def test_the_shift_convention_reads_the_row_before(pdiff_vocab):
    assert predictor(5) == 4 and predictor(1) == 0


def test_chunks_may_not_sample_control_tokens_or_eos_but_pad(pdiff_vocab):
    banned = set(pdiff_vocab.chunk_banned_ids)
    assert not banned & set(pdiff_vocab.pads) and len(pdiff_vocab.pads) == 7
    assert set(pdiff_vocab.eos) <= banned and pdiff_vocab.mask in banned
    assert {pdiff_vocab.promise_open, pdiff_vocab.async_open, pdiff_vocab.async_close,
            pdiff_vocab.sync, *pdiff_vocab.close_tens} <= banned
