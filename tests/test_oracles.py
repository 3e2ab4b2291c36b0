"""structure() against the rules written a second way (tests/oracles.py), on many generated
sequences, and the named cases a shared bug in the tracker would slip past."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import PLAIN, pasta_oracle, tip_oracle, wellformed_pasta

from solm.core.chat import text_ids
from solm.core.control_tokens import (ASYNC_CLOSE, ASYNC_OPEN, PROMISE_OPEN, SYNC, promise_close,
                                      register_token)
from solm.core.systems import pasta, tip
from solm.core.vocabulary import add_control_tokens

def pasta_alphabet(tok) -> list[int]:
    names = [PROMISE_OPEN, ASYNC_OPEN, ASYNC_CLOSE, SYNC] + [promise_close(n)
                                                              for n in (1, 2, 3, 7, 64)]
    return PLAIN + tok.convert_tokens_to_ids(names)


def assert_pasta_matches_oracle(ids, tok, vocab):
    s = pasta.structure(ids, vocab)
    visible, positions, targets = pasta_oracle(ids, tok, vocab.positions)
    assert s.position_ids.tolist() == positions
    assert s.targets.tolist() == targets
    assert torch.equal(s.visible, visible)


LAYOUTS = pytest.mark.parametrize("layout", pasta.POSITIONS)


@LAYOUTS
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_pasta_structure_equals_the_oracle_on_arbitrary_streams(pasta_tokenizer, layout, data):
    vocab = pasta.PastaVocab.from_tokenizer(pasta_tokenizer, layout)
    ids = data.draw(st.lists(st.sampled_from(pasta_alphabet(pasta_tokenizer)), min_size=1,
                             max_size=50))
    assert_pasta_matches_oracle(ids, pasta_tokenizer, vocab)


@LAYOUTS
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_pasta_structure_equals_the_oracle_on_annotated_streams(pasta_tokenizer, layout, data):
    vocab = pasta.PastaVocab.from_tokenizer(pasta_tokenizer, layout)
    ids = data.draw(wellformed_pasta(pasta_tokenizer))
    assert_pasta_matches_oracle(ids, pasta_tokenizer, vocab)


def test_overlap_positions_on_a_hand_checked_sequence(pasta_tokenizer):
    """The overlap oracle itself: blocks start after their promise, main continues after its
    own last token, the sync after the longest joined block."""
    text = ('A<promise topic="x" tokens="2"/><async> b b b</async>'
            '<promise topic="y" tokens="1"/><async> c</async> d<sync/> e')
    ids = text_ids(pasta_tokenizer, text)
    _, positions, _ = pasta_oracle(ids, pasta_tokenizer, "overlap")
    toks = pasta_tokenizer.convert_ids_to_tokens(ids)
    at = {t: i for i, t in reversed(list(enumerate(toks)))}  # first occurrence
    close1 = toks.index(promise_close(2))
    assert positions[close1 + 1] == positions[close1] + 1  # <async> after its promise
    block1_end = toks.index("</async>")
    assert positions[block1_end] == positions[close1] + 5  # <async> b b b </async>
    open2 = block1_end + 1  # main resumes right after the first closer
    assert positions[open2] == positions[close1] + 1
    block2_end = len(toks) - 1 - toks[::-1].index("</async>")
    assert positions[block2_end] == positions[open2] + 5  # <p y close <async> c </async>
    sync = at["<sync/>"]
    assert positions[sync - 1] == positions[block2_end - 2]  # " d" overlaps the block's " c"
    assert positions[sync] == positions[block2_end] + 1  # past the farthest joined block
    assert positions[sync + 1] == positions[sync] + 1


def test_the_promise_text_sets_the_position_jump(pasta_tokenizer, vocab):
    """tokens="N" in the text is what moves main by 10 N (not an id table the test reads)."""
    for n in (1, 3, 12, 64):
        text = f'A<promise topic="x" tokens="{n}"/><async> b</async> c<sync/>'
        ids = text_ids(pasta_tokenizer, text)
        s = pasta.structure(ids, vocab)
        close = ids.index(pasta_tokenizer.convert_tokens_to_ids(promise_close(n)))
        after_block = ids.index(vocab.async_close) + 1  # " c"
        assert s.position_ids[after_block] == s.position_ids[close] + 1 + 10 * n
        assert s.position_ids[close + 1] == s.position_ids[close] + 1  # block starts right after
        assert s.targets[close] == ids[after_block]  # the promise predicts " c", not <async>
        assert_pasta_matches_oracle(ids, pasta_tokenizer, vocab)


def test_oracle_reads_the_corpus_example_like_the_spec(pasta_tokenizer):
    """The oracle itself, on one hand-checked sequence (so the comparison is not vacuous)."""
    text = 'A<promise topic="x" tokens="2"/><async> b</async> c<sync/> d'
    ids = text_ids(pasta_tokenizer, text)
    visible, positions, targets = pasta_oracle(ids, pasta_tokenizer)
    #        A  <p  x  close <async> b </async>  c  sync  d
    assert positions == [0, 1, 2, 3, 4, 5, 6, 24, 25, 26]
    assert targets[3] == ids[7] and targets[4] == ids[5] and targets[6] == -100
    assert not visible[7, 4:7].any() and visible[8, 4:7].all() and visible[9].all()
    assert visible[5, :4].all() and not visible[5, 6:].any()


@pytest.fixture(scope="module")
def tip_tokenizer(pasta_tokenizer):
    from copy import deepcopy
    tok = deepcopy(pasta_tokenizer)
    add_control_tokens(None, tok, "tip", num_registers=3)
    return tok


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_tip_structure_equals_the_oracle(tip_tokenizer, data):
    tok = tip_tokenizer
    regs = tok.convert_tokens_to_ids([register_token(i) for i in range(3)])
    vocab = tip.TipVocab.from_tokenizer(tok, num_registers=3)
    prompt_len = data.draw(st.integers(0, 4))
    ids = data.draw(st.lists(st.sampled_from(PLAIN + regs), min_size=prompt_len + 1,
                             max_size=prompt_len + 40))
    s = tip.structure(ids, vocab, prompt_len)
    visible, positions, targets = tip_oracle(ids, tok, prompt_len)
    assert torch.equal(s.visible, visible)
    assert s.position_ids.tolist() == positions and s.targets.tolist() == targets


def test_tip_oracle_kills_a_reused_register_step(tip_tokenizer):
    tok = tip_tokenizer
    r0, r1 = tok.convert_tokens_to_ids([register_token(0), register_token(1)])
    ids = [1, r0, 5, r1, 6, r0, 7]  # prompt [1]
    visible, _, _ = tip_oracle(ids, tok, prompt_len=1)
    assert visible[4, [1, 2]].all() and not visible[5, [1, 2]].any()
    assert visible[6].tolist() == [True, False, False, True, True, True, True]
