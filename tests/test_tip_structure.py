"""TIP structure: a reused register kills the step that held it, for every later token."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from solm.core.systems.tip import PROMPT_STEP, TipTracker, TipVocab
from solm.core.systems.tip import structure as tip_structure

R0, R1, R2 = 100, 101, 102
VOCAB = TipVocab({R0: 0, R1: 1, R2: 2})


def test_reusing_a_register_hides_the_old_step_from_then_on():
    #        prompt   x  <r0>  a  a  <r1>  b  <r0>  c
    ids = [1, 2, 3, R0, 5, 6, R1, 7, R0, 8]
    s = tip_structure(ids, VOCAB, prompt_len=2)
    assert s.attrs["step"].tolist() == [PROMPT_STEP, PROMPT_STEP, 0, 1, 1, 1, 2, 2, 3, 3]
    new_r0, c = 8, 9
    old_step = [3, 4, 5]  # <r0> a a
    assert not s.visible[new_r0, old_step].any()  # the killing token already does not see it
    assert not s.visible[c, old_step].any()
    assert s.visible[c].tolist() == [True, True, True, False, False, False, True, True, True,
                                     True]
    assert s.visible[7, old_step].all()  # before the reuse the step is visible
    assert s.attrs["death"][old_step].tolist() == [8, 8, 8]
    assert (s.attrs["death"][[0, 1, 2, 6, 7, 8, 9]] == len(ids) + 1).all()
    assert s.position_ids.tolist() == list(range(len(ids)))
    assert s.targets[:-1].tolist() == ids[1:] and s.targets[-1] == -100


def test_from_tokenizer_needs_the_register_tokens(pasta_tokenizer):
    with pytest.raises(ValueError, match="add_control_tokens"):
        TipVocab.from_tokenizer(pasta_tokenizer, num_registers=4)


def test_tokenizer_registers(pasta_tokenizer):
    from copy import deepcopy

    from solm.core.vocabulary import add_control_tokens
    tok = deepcopy(pasta_tokenizer)
    add_control_tokens(None, tok, "tip", num_registers=4)
    v = TipVocab.from_tokenizer(tok, num_registers=4)
    assert v.num_registers == 4
    assert sorted(v.registers.values()) == [0, 1, 2, 3]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([R0, R1, R2, 7, 8]), min_size=1, max_size=40),
       st.integers(0, 4))
def test_mask_matches_a_token_by_token_replay(response, prompt_len):
    ids = list(range(1, prompt_len + 1)) + response
    s = tip_structure(ids, VOCAB, prompt_len)
    t = len(ids)
    assert not (s.visible & ~torch.ones(t, t, dtype=torch.bool).tril()).any()  # causal
    assert s.visible.diagonal().all()
    assert s.visible[:, :prompt_len].tril().equal(
        torch.ones(t, prompt_len, dtype=torch.bool).tril())
    # the runtime's view: feed tokens one by one, a token sees live steps only
    tracker, steps = TipTracker(VOCAB), []
    for i, tok in enumerate(response):
        step, _ = tracker.feed(tok)
        steps.append(step)
        row = s.visible[prompt_len + i, prompt_len:prompt_len + i + 1]
        expected = torch.tensor([tracker.is_live(x) for x in steps])
        assert row.equal(expected)
