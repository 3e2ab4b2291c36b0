"""The PASTA runtime: train/decode consistency, replay fidelity, grammar and clean stops."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import pasta_oracle, wellformed_pasta

from solm.core.chat import text_ids
from solm.core.models import tiny_model
from solm.core.pasta_lang import strip
from solm.core.sampling import SamplingConfig
from solm.core.structure import model_mask
from solm.core.systems.pasta import structure
from solm.core.systems.pasta_schedule import schedule_steps
from solm.decode.pasta import runtime as pr
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime, replay_scripts

PROMPT = "User: give me some tips\nAssistant:"
ANNOTATED = [
    # one promise
    'Sure:<promise topic="sleep" tokens="1"/><async> Get eight hours of sleep.</async>\n'
    '<sync/>That is all.',
    # two promises, sync, then a third whose block may see the first two
    'Tips:\n1. Sleep:<promise topic="sleep" tokens="1"/><async> Get 8 hours.</async>\n'
    '2. Eat:<promise topic="eat" tokens="2"/><async> Eat vegetables and fruit daily, '
    'and drink water.</async>\n<sync/>Also:<promise topic="move" tokens="1"/><async> Walk '
    'every day.</async><sync/> Done.',
    # three promises with blocks of very different lengths, no final text
    'A<promise topic="x" tokens="3"/><async> one two three four five six seven eight nine ten '
    'eleven twelve</async>B<promise topic="y" tokens="1"/><async> short</async>'
    'C<promise topic="z" tokens="1"/><async> mid length block here</async><sync/>',
]


LAYOUTS = pytest.mark.parametrize("layout", ["pred10x", "overlap"])


def laid_out(model, layout: str):
    """The model as `load_decoder` gives one trained with `layout` (its config records it)."""
    import copy

    model = copy.deepcopy(model)
    model.config.solm_positions = layout
    return model


def full_forward_logits(model, ids, vocab):
    s = structure(ids, vocab)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), position_ids=s.position_ids[None],
                    attention_mask=model_mask(s.visible, model))
    return out.logits[0]


@LAYOUTS
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("text", ANNOTATED)
def test_parallel_decode_logits_equal_one_forward_under_structure(pasta_tokenizer, text, seed,
                                                                  layout):
    model, tok = tiny_model(pasta_tokenizer, seed=seed, num_layers=3)
    model.config.solm_positions = layout
    rt = PastaRuntime(model, tok, pool_size=512)
    assert rt.vocab.positions == layout
    prompt, resp = text_ids(tok, PROMPT), text_ids(tok, text)
    res = rt.replay(prompt, resp, record_logits=True)
    ref = full_forward_logits(model, prompt + resp, rt.vocab)[len(prompt):]
    assert res.ids == resp
    assert res.logits.shape == ref.shape
    assert (res.logits - ref).abs().max().item() < 1e-4


@pytest.mark.parametrize("arch", ["qwen2", "gemma"])
def test_consistency_holds_for_other_architectures(pasta_tokenizer, arch):
    model, tok = tiny_model(pasta_tokenizer, seed=3, arch=arch)
    rt = PastaRuntime(model, tok, pool_size=512)
    prompt, resp = text_ids(tok, PROMPT), text_ids(tok, ANNOTATED[1])
    res = rt.replay(prompt, resp, record_logits=True)
    ref = full_forward_logits(model, prompt + resp, rt.vocab)[len(prompt):]
    assert res.ids == resp and (res.logits - ref).abs().max().item() < 1e-4


def test_parallel_and_sequential_differ_where_the_mask_says(pasta_tokenizer):
    """Sanity: a plain causal forward pass does NOT reproduce the parallel logits."""
    model, tok = tiny_model(pasta_tokenizer, seed=0)
    rt = PastaRuntime(model, tok, pool_size=512)
    prompt, resp = text_ids(tok, PROMPT), text_ids(tok, ANNOTATED[1])
    res = rt.replay(prompt, resp, record_logits=True)
    with torch.no_grad():
        causal = model(input_ids=torch.tensor([prompt + resp])).logits[0, len(prompt):]
    assert (res.logits - causal).abs().max().item() > 1e-3


@pytest.mark.parametrize("text", ANNOTATED)
def test_replay_reproduces_tokens_schedule_and_text(pasta_tokenizer, tiny, text):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    prompt, resp = text_ids(pasta_tokenizer, PROMPT), text_ids(pasta_tokenizer, text)
    res = rt.replay(prompt, resp)
    assert res.ids == resp and not res.flags
    assert res.forward_passes == schedule_steps(resp, rt.vocab) < len(resp)
    assert res.threads == text.count("<async>")
    from solm.decode.pasta.decode_file import result_record
    from solm.core.records import Record
    row = result_record(rt, Record("r", PROMPT), res, "parallel")
    assert row["response"] == strip(text)
    seq = rt.replay(prompt, text_ids(pasta_tokenizer, strip(text)), mode="sequential")
    assert seq.forward_passes == len(text_ids(pasta_tokenizer, strip(text)))


class Steered(torch.nn.Module):
    """Wraps a model and rewrites its logits so the next token after token X is rule[X]
    (or, when rule[X] is a list, its tokens in order of preference)."""

    def __init__(self, model, rule):
        super().__init__()
        self.inner, self.rule, self.config = model, rule, model.config

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, input_ids, **kw):
        out = self.inner(input_ids=input_ids, **kw)
        logits = out.logits.clone()
        for j, tok in enumerate(input_ids[0].tolist()):
            want = self.rule(tok)
            if want is not None:
                logits[0, j] = -1e4
                for rank, t in enumerate([want] if isinstance(want, int) else want):
                    logits[0, j, t] = 1e4 - rank
        out.logits = logits
        return out


def steered_runtime(pasta_tokenizer, tiny, rule, pool_size=256):
    return PastaRuntime(Steered(tiny, rule), pasta_tokenizer, pool_size=pool_size)


def ids_of(tok, *words):
    return [tok.convert_tokens_to_ids(w) for w in words]


def test_fork_cap_and_eos_with_open_forks_end_cleanly(pasta_tokenizer, tiny, vocab):
    v, tok = vocab, pasta_tokenizer
    word, other = ids_of(tok, "Ġhello", "Ġworld")
    c1 = next(k for k, n in v.close_tens.items() if n == 1)
    prompt = text_ids(tok, PROMPT)
    rule = {prompt[-1]: v.promise_open, v.promise_open: word, word: c1, c1: v.eos[0],
            v.async_open: other, other: other}.get
    rt = steered_runtime(tok, tiny, rule)
    res = rt.generate(prompt, PastaDecodeConfig(max_fork_tokens=6, max_new_tokens=100))
    assert pr.FLAG_FORK_CAPPED in res.flags and pr.FLAG_EOS_WITH_OPEN_FORKS in res.flags
    assert res.ids[-1] == v.async_close and res.ids.count(other) == 5
    assert res.threads == 1


def test_eos_inside_a_fork_closes_it(pasta_tokenizer, tiny, vocab):
    v, tok = vocab, pasta_tokenizer
    word, = ids_of(tok, "Ġhello")
    c1 = next(k for k, n in v.close_tens.items() if n == 1)
    prompt = text_ids(tok, PROMPT)
    rule = {prompt[-1]: v.promise_open, v.promise_open: word, word: c1, c1: v.sync,
            v.async_open: v.eos[0], v.sync: v.eos[0]}.get
    res = steered_runtime(tok, tiny, rule).generate(prompt, PastaDecodeConfig(
        mask_block_eos=False))
    assert pr.FLAG_FORK_EOS in res.flags
    assert res.ids == [v.promise_open, word, c1, v.async_open, v.async_close, v.sync]
    # masked (the default): the block cannot end with EOS; it writes on until a guard
    # closes it, and the answer is well-formed Pasta-Lang
    res = steered_runtime(tok, tiny, rule).generate(prompt, PastaDecodeConfig())
    assert pr.FLAG_FORK_EOS not in res.flags
    assert set(res.flags) & {pr.FLAG_PROMISE_OVERRUN, "block_repeating"}
    block = res.ids[res.ids.index(v.async_open) + 1:res.ids.index(v.async_close)]
    assert block and not set(block) & set(v.eos)


def test_full_pool_and_token_cap_stop_with_a_flag(pasta_tokenizer, tiny):
    tok = pasta_tokenizer
    prompt = text_ids(tok, PROMPT)
    word, = ids_of(tok, "Ġhello")
    rule = lambda t: word  # noqa: E731  (never ends)
    rt = steered_runtime(tok, tiny, rule, pool_size=len(prompt) + 20)
    res = rt.generate(prompt, PastaDecodeConfig(max_new_tokens=1000))
    assert res.flags == [pr.FLAG_POOL_FULL] and rt.used <= rt.pool_size
    res = steered_runtime(tok, tiny, rule).generate(prompt, PastaDecodeConfig(max_new_tokens=7))
    assert pr.FLAG_MAX_NEW_TOKENS in res.flags and len(res.ids) == 7


def test_grammar_keeps_forks_from_promising_or_syncing(pasta_tokenizer, tiny, vocab):
    """Even when the model prefers a promise or sync inside a block, the grammar forbids it."""
    v, tok = vocab, pasta_tokenizer
    word, = ids_of(tok, "Ġhello")
    c1 = next(k for k, n in v.close_tens.items() if n == 1)
    prompt = text_ids(tok, PROMPT)

    class Prefers(Steered):
        def forward(self, input_ids, **kw):
            out = self.inner(input_ids=input_ids, **kw)
            logits = out.logits.clone()
            logits[..., v.promise_open] += 50  # the model "wants" promises everywhere
            logits[..., v.sync] += 40
            for j, t in enumerate(input_ids[0].tolist()):
                if t == v.promise_open:
                    logits[0, j, c1] += 100
            out.logits = logits
            return out

    rt = PastaRuntime(Prefers(tiny, None), tok, pool_size=256)
    res = rt.generate(prompt, PastaDecodeConfig(max_new_tokens=40, max_fork_tokens=5))
    from solm.core.systems.pasta_schedule import thread_streams
    main, forks, _ = thread_streams(res.ids, v)
    assert forks, "main thread should have opened blocks"
    for stream in forks.values():
        assert v.promise_open not in stream[1:] and v.sync not in stream


def test_sequential_mode_never_emits_control_tokens(pasta_tokenizer, tiny, vocab):
    tok = pasta_tokenizer
    prompt = text_ids(tok, PROMPT)
    rt = steered_runtime(tok, tiny, lambda t: vocab.promise_open)
    res = rt.generate(prompt, PastaDecodeConfig(mode="sequential", max_new_tokens=10))
    assert not set(res.ids) & set(vocab.control_ids)


def test_sampling_is_seeded(pasta_tokenizer, tiny):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=256)
    prompt = text_ids(pasta_tokenizer, PROMPT)
    cfg = lambda s: PastaDecodeConfig(max_new_tokens=12, sampling=SamplingConfig(1.0, 0.9, s))  # noqa
    assert rt.generate(prompt, cfg(1)).ids == rt.generate(prompt, cfg(1)).ids
    assert rt.generate(prompt, cfg(1)).ids != rt.generate(prompt, cfg(2)).ids


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_arbitrary_streams_replay_without_crash_or_overrun(pasta_tokenizer, tiny, vocab, data):
    v = vocab
    alphabet = [100, 101, 102, v.promise_open, v.async_open, v.async_close, v.sync,
                *list(v.close_tens)[:2]]
    resp = data.draw(st.lists(st.sampled_from(alphabet), min_size=1, max_size=40))
    pool = data.draw(st.integers(min_value=8, max_value=60))
    prompt = [1, 2, 3]
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=pool)
    res = rt.replay(prompt, resp, record_logits=True)
    assert rt.used <= pool
    if not res.flags:
        assert res.ids == resp
        ref = full_forward_logits(tiny, prompt + resp, v)[len(prompt):]
        assert (res.logits - ref).abs().max().item() < 1e-4
    else:
        assert pr.FLAG_POOL_FULL in res.flags
        assert set(res.flags) <= {pr.FLAG_POOL_FULL, pr.FLAG_BLOCK_CUT}


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), pool=st.integers(12, 80))
def test_free_sampling_with_tag_happy_model_never_crashes(pasta_tokenizer, tiny, vocab, seed,
                                                          pool):
    v = vocab

    class TagHappy(Steered):
        def forward(self, input_ids, **kw):
            out = self.inner(input_ids=input_ids, **kw)
            logits = out.logits.clone()
            logits[..., v.control_ids] += 8.0
            out.logits = logits
            return out

    rt = PastaRuntime(TagHappy(tiny, None), pasta_tokenizer, pool_size=pool)
    res = rt.generate([1, 2, 3], PastaDecodeConfig(max_new_tokens=60, max_fork_tokens=8,
                                              sampling=SamplingConfig(1.5, 1.0, seed)))
    assert rt.used <= pool
    assert set(res.flags) <= {pr.FLAG_POOL_FULL, pr.FLAG_MAX_NEW_TOKENS, pr.FLAG_FORK_CAPPED,
                              pr.FLAG_FORK_EOS, pr.FLAG_EOS_WITH_OPEN_FORKS,
                              pr.FLAG_TOPIC_CAPPED, pr.FLAG_BLOCK_CUT}


def test_penalty_scope_blocks_leaves_the_main_thread_alone(pasta_tokenizer, tiny):
    from solm.core.systems.pasta import MAIN, PastaTracker
    from solm.decode.pasta.runtime import PastaRunState, _Thread

    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=64)
    seen = []

    def spy(logits, banned=None, history=()):
        seen.append(list(history))
        return 0

    logits = torch.zeros(len(pasta_tokenizer))
    state = PastaRunState(PastaDecodeConfig(), PastaTracker(rt.vocab), None, set())
    main, block = _Thread(MAIN, fed=[5, 6]), _Thread(3, fed=[7, 8])
    for scope, expected in (("blocks", [[], [7, 8]]), ("all", [[5, 6], [7, 8]])):
        seen.clear()
        choose = rt.sampling_chooser(spy, PastaDecodeConfig(penalize=scope))
        choose(main, logits, state)
        choose(block, logits, state)
        assert seen == expected
    with pytest.raises(ValueError, match="penalize"):
        rt.sampling_chooser(spy, PastaDecodeConfig(penalize="main"))


@pytest.mark.parametrize("cap", [3, 24])
def test_a_topic_closes_at_the_configured_length(pasta_tokenizer, tiny, cap):
    """`max_topic_tokens` N: a topic of N tokens may only close (and is flagged), one of N-1
    may go on; the setting is the config's, not a fixed one."""
    from solm.core.systems.pasta import PastaTracker
    from solm.decode.pasta.runtime import PastaRunState, _Thread

    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=64)
    seen = []

    def spy(logits, banned=None, history=()):
        seen.append(banned)
        return 0

    config = PastaDecodeConfig(max_topic_tokens=cap)
    choose = rt.sampling_chooser(spy, config)
    logits = torch.zeros(len(pasta_tokenizer))
    closers = list(rt.vocab.close_tens)
    for length, must_close in ((cap - 1, False), (cap, True)):
        state = PastaRunState(config, PastaTracker(rt.vocab), None, set())
        choose(_Thread(0, in_topic=True, topic_len=length), logits, state)
        allowed = (~seen[-1]).nonzero().flatten().tolist()
        assert (sorted(allowed) == sorted(closers)) == must_close
        assert (pr.FLAG_TOPIC_CAPPED in state.flags) == must_close


@pytest.mark.parametrize("mask", [False, True])
def test_eos_in_a_block_is_masked_only_when_asked(pasta_tokenizer, tiny, mask):
    """A block's banned tokens: promise tags, `<async>`, `<sync/>`, promise closers, and EOS
    exactly when `mask_block_eos`; `</async>` and text stay allowed."""
    from solm.core.systems.pasta import PastaTracker
    from solm.decode.pasta.runtime import PastaRunState, _Thread

    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=64)
    v, seen = rt.vocab, []
    config = PastaDecodeConfig(mask_block_eos=mask)
    choose = rt.sampling_chooser(lambda logits, banned=None, history=(): seen.append(banned)
                                 or 0, config)
    state = PastaRunState(config, PastaTracker(v), None, set())
    choose(_Thread(3), torch.zeros(len(pasta_tokenizer)), state)
    banned = set(seen[-1].nonzero().flatten().tolist())
    want = {v.promise_open, v.async_open, v.sync, *v.close_tens} | (set(v.eos) if mask else set())
    assert banned == want


def test_no_repeat_ngram_breaks_a_loop_inside_a_block_and_lets_it_close(pasta_tokenizer, tiny,
                                                                        vocab):
    v, tok = vocab, pasta_tokenizer
    word, a, b = ids_of(tok, "Ġhello", "Ġa", "Ġb")
    c1 = next(k for k, n in v.close_tens.items() if n == 1)
    prompt = text_ids(tok, PROMPT)
    rule = {prompt[-1]: [v.promise_open], v.promise_open: [word], word: [c1], c1: [v.sync],
            v.sync: [v.eos[0]], v.async_open: [a], a: [b, v.async_close],
            b: [a, v.async_close]}.get
    rt = steered_runtime(tok, tiny, rule)
    looping = rt.generate(prompt, PastaDecodeConfig(max_fork_tokens=8, penalize="blocks"))
    assert pr.FLAG_FORK_CAPPED in looping.flags
    cfg = PastaDecodeConfig(max_fork_tokens=8, penalize="blocks",
                       sampling=SamplingConfig(no_repeat_ngram=2))
    res = rt.generate(prompt, cfg)
    assert res.flags == []
    # "a b" may not come twice, so the block closes; the main thread is not restricted
    assert res.ids == [v.promise_open, word, c1, v.async_open, a, b, a, v.async_close, v.sync]


def uneven_blocks_then_sync(v):
    """A long block, then a short one that finishes first, then `<sync/>` and text."""
    c1, c2 = (next(k for k, n in v.close_tens.items() if n == m) for m in (1, 2))
    A, T, X, Y, D = 100, 104, 105, 106, 103
    return [A, v.promise_open, T, c2, v.async_open, *[X] * 12, v.async_close,
            v.promise_open, T, c1, v.async_open, Y, v.async_close, v.sync, D]


def test_sync_waits_for_every_open_block_not_the_first_to_finish(pasta_tokenizer, tiny, vocab):
    """A short block finishes while a longer one is still open when main reaches `<sync/>`:
    the sync enters the pool with the long block's `</async>`, and sees all of it."""
    v = vocab
    resp = uneven_blocks_then_sync(v)
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=256)
    prompt = [1, 2, 3]
    res = rt.replay(prompt, resp, record_logits=True)
    # A | popen | T | c2 <async> | popen X | T X | c1 <async> X | Y X | </async> X | X x8 ...
    # the long block's </async> comes in step 17 with the sync; D in step 18
    assert res.forward_passes == 18 == schedule_steps(resp, v)
    ref = full_forward_logits(tiny, prompt + resp, v)[len(prompt):]
    assert (res.logits - ref).abs().max().item() < 1e-4


def oracle_forward_logits(model, ids, tokenizer):
    visible, positions, _ = pasta_oracle(ids, tokenizer, model.config.solm_positions
                                         if hasattr(model.config, "solm_positions")
                                         else "pred10x")
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                     attention_mask=model_mask(visible, model)).logits[0]


def named_sequences(v):
    c1, c3 = (next(k for k, n in v.close_tens.items() if n == m) for m in (1, 3))
    A, T, X, Y = 100, 104, 105, 106
    return {
        "sync_after_uneven_blocks": uneven_blocks_then_sync(v),
        "block_after_sync_sees_joined_blocks": [
            A, v.promise_open, T, c1, v.async_open, X, X, v.async_close, v.sync,
            v.promise_open, T, c3, v.async_open, Y, Y, Y, v.async_close, A, v.sync, A],
        "three_blocks_two_syncs": [
            v.promise_open, T, c1, v.async_open, X, v.async_close, v.promise_open, T, c3,
            v.async_open, Y, Y, Y, Y, Y, v.async_close, v.sync, A, v.promise_open, T, c1,
            v.async_open, X, v.async_close, A, A, v.sync, A],
        "promise_without_block_then_block": [
            A, v.promise_open, T, c3, A, v.promise_open, T, c1, v.async_open, X,
            v.async_close, v.sync, A],
    }


@LAYOUTS
@pytest.mark.parametrize("name", ["sync_after_uneven_blocks",
                                  "block_after_sync_sees_joined_blocks",
                                  "three_blocks_two_syncs", "promise_without_block_then_block"])
def test_runtime_replay_equals_the_oracle_on_named_sequences(pasta_tokenizer, tiny, vocab, name,
                                                             layout):
    assert_replay_matches_oracle(laid_out(tiny, layout), pasta_tokenizer,
                                 named_sequences(vocab)[name])


def assert_replay_matches_oracle(model, tokenizer, resp, prompt=(1, 2, 3)):
    prompt = list(prompt)
    res = PastaRuntime(model, tokenizer, pool_size=256).replay(prompt, resp, record_logits=True)
    assert res.ids == resp
    ref = oracle_forward_logits(model, prompt + resp, tokenizer)[len(prompt):]
    assert (res.logits - ref).abs().max().item() < 1e-4


@LAYOUTS
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_runtime_replay_equals_a_forward_under_the_oracle(pasta_tokenizer, tiny, data, layout):
    """Decoding, step by step, computes what one forward pass under the spec's mask and
    positions computes (oracle, not structure()): a rule the tracker got wrong for both
    training and decoding still fails here."""
    resp = data.draw(wellformed_pasta(pasta_tokenizer))
    assert_replay_matches_oracle(laid_out(tiny, layout), pasta_tokenizer, resp)


def test_one_step_at_a_time_is_the_whole_run(pasta_tokenizer, tiny, vocab):
    """prefill / step / finish can be driven by hand (a compiled step, another scheduler) and
    give exactly what run() gives; each step feeds the threads the schedule says."""
    v = vocab
    resp = uneven_blocks_then_sync(v)
    prompt = [1, 2, 3]
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=256)
    whole = rt.replay(prompt, resp, record_logits=True)

    streams, anchors = replay_scripts(resp, v)
    cfg = PastaDecodeConfig(record_logits=True, max_new_tokens=len(resp) + 1,
                            max_fork_tokens=len(resp) + 1)
    state = rt.prefill(prompt, cfg, chooser=None, scripts=streams, replay_anchors=anchors)
    assert rt.used == len(prompt) and state.steps == 0
    fed = []
    while True:
        before = state.fed_total
        if not rt.step(state):
            break
        fed.append(state.fed_total - before)
    # 1 | 1 | 1 | close + <async> | main + long block | ... | sync + </async> | D
    assert fed[:4] == [1, 1, 1, 2] and fed[6] == 3 and fed[-2:] == [2, 1]
    by_hand = rt.finish(state)
    assert by_hand.ids == whole.ids == resp
    assert by_hand.forward_passes == whole.forward_passes == len(fed)
    assert torch.equal(by_hand.logits, whole.logits)


@pytest.mark.parametrize("nudge,held", [(0.0, 14), (3.0, 11), (12.0, 10)])
def test_the_close_nudge_ends_a_block_where_its_closer_comes_within_reach(
        pasta_tokenizer, tiny, vocab, nudge, held):
    """A block under tokens="1" (10 promised, slack 4) whose model ranks `</async>` one logit
    below going on: off, the promise guard closes it at 14 tokens; a nudge of 3 lifts the
    closer by 3 x (c - 9) / 5 at c >= 10 tokens, past the gap of 1 first at c = 11; a nudge of
    12 at c = 10 already (12 / 5 > 1)."""
    v, tok = vocab, pasta_tokenizer
    word, other = ids_of(tok, "Ġhello", "Ġworld")
    c1 = next(k for k, n in v.close_tens.items() if n == 1)
    prompt = text_ids(tok, PROMPT)
    rule = {prompt[-1]: v.promise_open, v.promise_open: word, word: c1, c1: v.sync,
            v.sync: v.eos[0], v.async_open: other, other: [other, v.async_close]}.get
    res = steered_runtime(tok, tiny, rule).generate(prompt, PastaDecodeConfig(
        close_nudge=nudge, block_repeats=0, max_new_tokens=100))
    block = res.ids[res.ids.index(v.async_open) + 1:res.ids.index(v.async_close)]
    assert block == [other] * held
    assert (pr.FLAG_PROMISE_OVERRUN in res.flags) == (nudge == 0.0)
