"""A sampled answer's log-prob under the training structure equals what the runtime had when
it sampled it (fp32, tiny model): per token the raw log-prob (before grammar masks and
penalties) of every token the model chose, the end-of-sequence token included, and none of
the tokens the runtime forced (`<async>`, a `</async>` put in the place of an end-of-sequence
or of a block past its cap)."""

import pytest
import torch

from solm.train.flex import flex_copy as flex_twin
from solm.core.chat import prompt_ids, text_ids
from solm.decode.flags import FORK_CAPPED, FORK_EOS
from solm.decode.pasta.batched import BatchedPastaRuntime, BatchRequest
from solm.decode.pasta.runtime import PastaDecodeConfig
from solm.train.sequence_logprobs import (SampledAnswer, batch_answers, encode_answer,
                                          sequence_logprobs, token_logprobs)

MAIN = ('Tips:\n1.<promise topic="sleep" tokens="2"/>\n2.<promise topic="food" tokens="3"/>'
        ' and more text<sync/> Done.')


def scripted_chooser(tok, vocab):
    """Chooses like a sampler would (the runtime cannot tell): main follows MAIN then ends;
    block 1 writes a few words then an end-of-sequence (the runtime closes it instead);
    block 2 runs on past its cap (the runtime closes it)."""
    main = text_ids(tok, MAIN) + [tok.eos_token_id]
    blocks = {1: text_ids(tok, " Sleep well.") + [tok.eos_token_id],
              2: text_ids(tok, " Eat many green vegetables every single day of the week.")}

    def choose(th, logits, state):
        k = len(th.fed)
        if th.tid == 0:
            return main[k]
        return blocks[th.tid][k - 1]  # the block's first fed token was the forced <async>
    return choose


def decode(tiny, tok, vocab, max_fork_tokens=6):
    rt = BatchedPastaRuntime(tiny, tok, pool_size=512, max_batch=2)
    prompt = prompt_ids(tok, "Give me tips.")
    cfg = PastaDecodeConfig(mode="parallel", record_logprobs=True, max_new_tokens=200,
                            max_fork_tokens=max_fork_tokens)
    (done,) = list(rt.run([BatchRequest(0, prompt, cfg,
                                        chooser=scripted_chooser(tok, vocab))]))
    return prompt, done.result


@pytest.mark.parametrize("attention", ["sdpa", "flex"])
def test_runtime_logprobs_equal_the_structure_logprobs(tiny, pasta_tokenizer, vocab, attention):
    """Under FlexAttention too: the log-probs come from a BlockMask built from the
    same structure, never from a dense mask the flex model would add to its scores."""
    tok = pasta_tokenizer
    prompt, res = decode(tiny, tok, vocab)
    scorer = flex_twin(tiny) if attention == "flex" else tiny
    assert FORK_EOS in res.flags and FORK_CAPPED in res.flags
    forced = res.forced
    forced_tokens = [res.ids[i] for i in forced]
    # two <async>, and the two </async> the runtime put in
    assert sorted(forced_tokens) == sorted([vocab.async_open] * 2 + [vocab.async_close] * 2)
    assert res.end_logprob is not None and res.ended
    answer = SampledAnswer(prompt, res.ids, forced, ended=True)
    batch = batch_answers([answer], vocab, tok.eos_token_id, tok.pad_token_id or 0,
                          flex=attention == "flex")
    with torch.no_grad():
        per_position = token_logprobs(scorer, batch)[0]
        total = sequence_logprobs(scorer, batch)[0].item()
    # the oracle, token by token: the runtime's record, in the order of the ids
    from solm.core.systems.pasta import walk_with_predictors
    ids = encode_answer(answer, vocab, tok.eos_token_id).input_ids
    _, _, predictor = walk_with_predictors(ids, vocab)
    p = len(prompt)
    runtime = [*res.logprobs, res.end_logprob]
    counted = 0
    for j, lp in enumerate(runtime):
        source = predictor[p + j]
        if lp is None:  # forced: no target anywhere
            assert source < 0 or per_position[source].item() == 0.0
            continue
        assert abs(per_position[source].item() - lp) < 1e-4, j
        counted += 1
    assert counted == len(res.ids) + 1 - len(forced)
    expected = sum(lp for lp in runtime if lp is not None)
    assert abs(total - expected) < 1e-4 * max(1.0, abs(expected)) / 10
    # the forced tokens matter: counting them changes the sum
    everything = SampledAnswer(prompt, res.ids, [], ended=True)
    with torch.no_grad():
        with_forced = sequence_logprobs(tiny, batch_answers([everything], vocab,
                                                            tok.eos_token_id, 0))[0].item()
    assert abs(with_forced - total) > 1e-3


def test_a_capped_answer_counts_no_end_token(tiny, pasta_tokenizer, vocab):
    tok = pasta_tokenizer
    rt = BatchedPastaRuntime(tiny, tok, pool_size=512)
    prompt = prompt_ids(tok, "Hello")
    cfg = PastaDecodeConfig(mode="sequential", record_logprobs=True, max_new_tokens=7)
    (res,) = rt.generate_many([prompt], cfg)
    assert res.end_logprob is None and len(res.ids) == 7 and res.forced == []
    assert not res.ended
    batch = batch_answers([SampledAnswer(prompt, res.ids, [], ended=False)], vocab,
                          tok.eos_token_id, 0)
    with torch.no_grad():
        total = sequence_logprobs(tiny, batch)[0].item()
    assert abs(total - sum(res.logprobs)) < 1e-4


def test_forced_tokens_are_known_without_recording_logprobs(tiny, pasta_tokenizer, vocab):
    """What the runtime forced does not depend on record_logprobs (the preference stage
    samples without it)."""
    tok = pasta_tokenizer
    rt = BatchedPastaRuntime(tiny, tok, pool_size=512, max_batch=2)
    prompt = prompt_ids(tok, "Give me tips.")
    out = {}
    for record in (True, False):
        cfg = PastaDecodeConfig(mode="parallel", record_logprobs=record, max_new_tokens=200,
                                max_fork_tokens=6)
        (done,) = list(rt.run([BatchRequest(0, prompt, cfg,
                                            chooser=scripted_chooser(tok, vocab))]))
        out[record] = done.result
    assert out[True].ids == out[False].ids and out[False].logprobs is None
    assert out[True].forced == out[False].forced and len(out[False].forced) == 4
    assert out[True].ended and out[False].ended


def test_a_forced_index_outside_the_answer_is_refused(vocab, pasta_tokenizer):
    with pytest.raises(ValueError, match="outside the response"):
        encode_answer(SampledAnswer([1, 2], [3, 4], [5]), vocab, pasta_tokenizer.eos_token_id)
