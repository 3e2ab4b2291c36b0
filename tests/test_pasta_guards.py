"""The guards that keep PASTA's promises at decode: a block closed at its promise + slack or
when it loops, the forced closer's structure equal to training's, and the grammar's masks
against the rules written a second way."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import pasta_oracle

from solm.core.chat import text_ids
from solm.core.models import tiny_model
from solm.core.structure import model_mask
from solm.decode import flags
from solm.decode.pasta.guards import block_limit, repeating
from solm.decode.pasta.runtime import MAIN, PastaDecodeConfig, PastaRuntime

PROMPT = "User: give me some tips\nAssistant:"
# the limit written out by hand: 10 T promised tokens, plus max(4, a quarter of them)
HAND_LIMITS = {1: 10 + 4, 2: 20 + 5, 3: 30 + 7, 4: 40 + 10, 7: 70 + 17, 64: 640 + 160}
WORDS = list(range(1000, 1400))  # ordinary tokens, all distinct


def test_block_limit_is_the_promise_plus_its_slack():
    assert {t: block_limit(t) for t in HAND_LIMITS} == HAND_LIMITS


def test_repeating_counts_the_last_run_of_four():
    a, b, c, d, e = 1, 2, 3, 4, 5
    assert not repeating([a, b, c, d, a, b, c, d], 3)
    assert repeating([a, b, c, d, a, b, c, d, a, b, c, d], 3)
    assert repeating([a, a, a, a, a, a], 3)  # overlapping runs count
    assert not repeating([a, b, c, d, a, b, c, d, a, b, c, e], 3)
    assert not repeating([a] * 50, 0)  # 0: off


def scripted(vocab, tens: int, block_word):
    """A chooser that writes `A <promise topic="w" tokens="T"/>`, a block that never closes
    (block_word(k) is its k-th token), then `<sync/>` and the end."""
    close = next(k for k, n in vocab.close_tens.items() if n == tens)
    main_script = [WORDS[0], vocab.promise_open, WORDS[1], close, vocab.sync, WORDS[2],
                   vocab.eos[0]]

    def choose(thread, logits, state):
        if thread.tid == MAIN:
            return main_script[len(thread.fed)]
        return block_word(len(thread.fed) - 1)

    return choose


def forward_under_the_oracle(model, tok, ids, layout):
    visible, positions, _ = pasta_oracle(ids, tok, layout)
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                     attention_mask=model_mask(visible, model)).logits[0]


@pytest.mark.parametrize("layout", ["pred10x", "overlap"])
@pytest.mark.parametrize("tens", [1, 2, 3])
def test_a_looping_block_is_closed_at_its_promise_plus_slack_as_training_reads_it(
        pasta_tokenizer, tens, layout):
    model, tok = tiny_model(pasta_tokenizer, seed=tens, num_layers=2)
    model.config.solm_positions = layout
    rt = PastaRuntime(model, tok, pool_size=512)
    v = rt.vocab
    prompt = text_ids(tok, PROMPT)
    res = rt.run(prompt, PastaDecodeConfig(record_logits=True),
                 chooser=scripted(v, tens, lambda k: WORDS[10 + k]))
    opened, closed = res.ids.index(v.async_open), res.ids.index(v.async_close)
    assert closed - opened - 1 == HAND_LIMITS[tens]
    assert closed in res.forced and flags.PROMISE_OVERRUN in res.flags and res.guarded == 1
    assert res.ids[closed + 1:] == [v.sync, WORDS[2]] and res.ended
    ref = forward_under_the_oracle(model, tok, prompt + res.ids, layout)[len(prompt):]
    assert (res.logits - ref).abs().max().item() < 1e-4


def test_without_keep_promises_the_block_runs_to_the_fork_cap(pasta_tokenizer, tiny):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=256)
    v = rt.vocab
    res = rt.run(text_ids(pasta_tokenizer, PROMPT),
                 PastaDecodeConfig(keep_promises=False, max_fork_tokens=30),
                 chooser=scripted(v, 1, lambda k: WORDS[10 + k]))
    opened, closed = res.ids.index(v.async_open), res.ids.index(v.async_close)
    assert closed - opened == 30 and res.flags == [flags.FORK_CAPPED] and res.guarded == 0


def test_a_block_that_loops_is_closed_at_the_third_run(pasta_tokenizer, tiny):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=256)
    v = rt.vocab
    cycle = WORDS[20:24]
    res = rt.run(text_ids(pasta_tokenizer, PROMPT), PastaDecodeConfig(),
                 chooser=scripted(v, 4, lambda k: cycle[k % 4]))
    block = res.ids[res.ids.index(v.async_open) + 1:res.ids.index(v.async_close)]
    assert block == cycle * 3 and res.flags == [flags.BLOCK_REPEATING]
    from solm.core.records import Record
    from solm.decode.pasta.decode_file import result_record

    row = result_record(rt, Record("r", PROMPT), res, "parallel")
    assert row["guarded_blocks"] == 1 == row["threads"]
    off = rt.run(text_ids(pasta_tokenizer, PROMPT), PastaDecodeConfig(block_repeats=0),
                 chooser=scripted(v, 4, lambda k: cycle[k % 4]))
    assert off.flags == [flags.PROMISE_OVERRUN]


def test_the_guards_leave_replays_alone(pasta_tokenizer, tiny):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    v = rt.vocab
    close = next(k for k, n in v.close_tens.items() if n == 1)
    resp = [WORDS[0], v.promise_open, WORDS[1], close, v.async_open, *WORDS[10:40],
            v.async_close, v.sync]
    res = rt.replay(text_ids(pasta_tokenizer, PROMPT), resp)
    assert res.ids == resp and res.flags == []


# ---- the grammar, against the rules written a second way ---------------------------------

def allowed_in_main(promises_in_group: int, cap: int) -> set[str]:
    """Pasta-Lang in the main thread, outside a topic: a promise while the group has room, a
    `<sync/>` once something is promised, never a block's tags or a bare closer."""
    out = set()
    if promises_in_group < cap:
        out.add("promise")
    if promises_in_group > 0:
        out.add("sync")
    return out


class Spy:
    """A sampler that records what the grammar banned and writes the scripted token."""

    def __init__(self):
        self.banned, self.next = None, None

    def __call__(self, logits, banned=None, history=()):
        self.banned = banned
        return self.next


@settings(max_examples=40, deadline=None)
@given(choices=st.lists(st.integers(0, 5), min_size=1, max_size=30), cap=st.integers(1, 4))
def test_the_grammar_masks_exactly_the_tags_the_rules_forbid(pasta_tokenizer, tiny, choices,
                                                             cap):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    v = rt.vocab
    name_of = {v.promise_open: "promise", v.sync: "sync", v.async_open: "async_open",
               v.async_close: "async_close", **{c: "closer" for c in v.close_tens}}
    close1 = next(k for k, n in v.close_tens.items() if n == 1)
    config = PastaDecodeConfig(max_promises=cap)
    spy = Spy()
    inner = rt.sampling_chooser(spy, config)
    picks = iter(choices)
    seen = {"main": [], "block": []}
    group = {"promises": 0}

    def choose(thread, logits, state):
        if thread.tid != MAIN:  # a block writes one word and closes
            spy.next = WORDS[5] if len(thread.fed) == 1 else v.async_close
            inner(thread, logits, state)
            seen["block"].append({name_of[c] for c in v.control_ids if not spy.banned[c]})
            return spy.next
        last = thread.fed[-1] if thread.fed else None
        if last == v.promise_open:
            return WORDS[6]  # the topic
        if thread.in_topic:
            return close1
        allowed = sorted(allowed_in_main(group["promises"], cap))
        options = ["word", *allowed, "end"]
        pick = next(picks, len(options) - 1)
        choice = options[min(pick, len(options) - 1)]
        spy.next = {"word": WORDS[7], "promise": v.promise_open, "sync": v.sync,
                    "end": v.eos[0]}[choice]
        inner(thread, logits, state)
        got = {name_of[c] for c in v.control_ids if not spy.banned[c]}
        seen["main"].append((got, set(allowed)))
        group["promises"] = {"promise": group["promises"] + 1, "sync": 0}.get(
            choice, group["promises"])
        return spy.next

    rt.run(text_ids(pasta_tokenizer, PROMPT), config, chooser=choose)
    for got, expected in seen["main"]:
        assert got == expected
    assert all(got == {"async_close"} for got in seen["block"])
