import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from solm.core.structure import IGNORE
from solm.core.systems.pasta import structure
from solm.core.systems.pasta_schedule import pasta_metrics, schedule_steps

A, B, C, D, T, X, Y, Z = 100, 101, 102, 103, 104, 105, 106, 107


def seq_one_promise(v):
    close2 = next(k for k, n in v.close_tens.items() if n == 2)
    return [A, B, v.promise_open, T, close2, v.async_open, X, Y, v.async_close, C, v.sync, D]


def test_positions_follow_pred_10x(vocab):
    s = structure(seq_one_promise(vocab), vocab)
    assert s.position_ids.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 25, 26, 27]


def test_targets_skip_the_block_at_the_promise(vocab):
    v = vocab
    s = structure(seq_one_promise(v), v)
    assert s.targets.tolist() == [B, v.promise_open, T, seq_one_promise(v)[4], C,  # close -> C
                                  X, Y, v.async_close, IGNORE,  # </async> predicts nothing
                                  v.sync, D, IGNORE]


def test_visibility_rules(vocab):
    s = structure(seq_one_promise(vocab), vocab)
    vis = s.visible
    main_before, block, c, sync, d = [0, 1, 2, 3, 4], [5, 6, 7, 8], 9, 10, 11
    assert vis[c, main_before].all() and not vis[c, block].any()
    assert vis[sync].sum() == 11 and vis[d].all()
    assert vis[6, main_before].all() and vis[6, [5, 6]].all() and not vis[6, [7, 8, 9]].any()
    assert torch.equal(vis, vis & torch.ones_like(vis).tril())  # never attends to the future


def test_second_block_does_not_see_first_until_sync(vocab):
    v = vocab
    c1 = next(k for k, n in v.close_tens.items() if n == 1)
    ids = [A, v.promise_open, T, c1, v.async_open, X, v.async_close,
           B, v.promise_open, T, c1, v.async_open, Y, v.async_close,
           v.sync, v.promise_open, T, c1, v.async_open, Z, v.async_close, v.sync, D]
    s = structure(ids, v)
    first, second, third = [4, 5, 6], [11, 12, 13], [18, 19, 20]
    assert not s.visible[12, first].any()
    assert s.visible[19, first + second].all()  # the third block's promise came after a sync
    assert not s.visible[B if False else 7, first].any()
    assert s.visible[22, first + second + third].all()


def test_malformed_sequences_have_documented_behaviour(vocab):
    v = vocab
    c1 = next(k for k, n in v.close_tens.items() if n == 1)
    # stray <async>/</async> in main are ordinary main tokens
    s = structure([A, v.async_open, B, v.async_close, C], v)
    assert s.position_ids.tolist() == [0, 1, 2, 3, 4]
    assert s.visible.equal(torch.ones(5, 5, dtype=torch.bool).tril())
    # a promise without a block still moves main's positions by 10 N
    s = structure([A, v.promise_open, T, c1, B], v)
    assert s.position_ids.tolist() == [0, 1, 2, 3, 14]
    # unclosed block runs to the end and main never sees it
    s = structure([A, v.promise_open, T, c1, v.async_open, X, Y], v)
    assert s.targets.tolist()[-1] == IGNORE and s.position_ids.tolist()[-3:] == [4, 5, 6]
    # a nested promise inside a block is an ordinary block token
    s = structure([A, v.promise_open, T, c1, v.async_open, v.promise_open, T, c1,
                   v.async_open, X, v.async_close, B], v)
    assert s.position_ids.tolist()[4:11] == [4, 5, 6, 7, 8, 9, 10]
    assert s.position_ids.tolist()[11] == 14
    # sync with nothing open is harmless
    s = structure([A, v.sync, B], v)
    assert s.visible.equal(torch.ones(3, 3, dtype=torch.bool).tril())


def test_metrics_of_a_two_block_response(vocab):
    v = vocab
    c1 = next(k for k, n in v.close_tens.items() if n == 1)
    ids = [A, v.promise_open, T, c1, v.async_open, X, X, X, v.async_close,
           B, v.promise_open, T, c1, v.async_open, Y, Y, v.async_close, C, v.sync, D]
    m = pasta_metrics(ids, v)
    assert m.content_tokens == 9  # A X X X B Y Y C D; topic tokens belong to the tag
    assert m.promises == 2
    # steps: A | popen | T | close+<async> | B,X | popen,X | T,X | close,</async>,<async> |
    # C,Y | Y (main waits at sync) | sync with the last </async> | D
    assert m.critical_path == schedule_steps(ids, v) == 12


def token_streams(vocab):
    v = vocab
    alphabet = [A, B, C, T, X, v.promise_open, v.async_open, v.async_close, v.sync,
                *list(v.close_tens)[:3]]
    return st.lists(st.sampled_from(alphabet), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_arbitrary_streams_never_crash_and_stay_causal(vocab, data):
    ids = data.draw(token_streams(vocab))
    s = structure(ids, vocab)
    n = len(ids)
    assert s.visible.shape == (n, n) and s.visible.diagonal().all()
    assert not s.visible.triu(1).any()
    assert s.targets.shape == (n,) and s.position_ids.shape == (n,)
    assert schedule_steps(ids, vocab) <= n
