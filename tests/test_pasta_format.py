import pytest

from solm.decode.pasta.format_stats import format_stats, is_well_formed

GOOD = '1.<promise topic="a" tokens="1"/><async> A.</async>\n2.<promise topic="b" tokens="1"/>' \
       '<async> B.</async><sync/>'


def row(annotated, content, critical, promises, flags=(), decode_s=1.0, total=None):
    return {"annotated": annotated, "content_tokens": content, "critical_path": critical,
            "promises": promises, "flags": list(flags), "decode_s": decode_s,
            "total_tokens": total if total is not None else content}


@pytest.mark.parametrize("text, flags, ok", [
    (GOOD, [], True),
    ("plain text", [], True),
    (GOOD, ["max_new_tokens"], True),  # a length cap is not a format error
    (GOOD, ["eos_in_fork"], False),
    ('1.<promise topic="a" tokens="1"/><async> A.', [], False),  # block never closed
    ('<promise topic="a" tokens="1"/>text', [], False),  # promise without its block
])
def test_well_formed(text, flags, ok):
    assert is_well_formed(text, flags) is ok


def test_format_stats():
    rows = [row(GOOD, 20, 10, 2, total=26), row("plain", 10, 10, 0), row("<async>", 8, 8, 0),
            row(GOOD, 30, 10, 2, ["max_new_tokens"], total=36)]
    st = format_stats(rows)
    assert st.rows == 4 and st.well_formed == 0.75 and st.with_promise == 0.5
    assert st.mean_parallelism_with_promise == pytest.approx((2.6 + 3.6) / 2)
    assert st.mean_content_speedup_with_promise == pytest.approx((2.0 + 3.0) / 2)
    assert st.geomean_content_speedup == pytest.approx((2 * 1 * 1 * 3) ** 0.25)
    assert st.hit_max_tokens == 0.25 and st.tokens_per_s == pytest.approx(68 / 4)
    assert not is_well_formed(GOOD, ["max_new_tokens", "block_cut"])
    with pytest.raises(ValueError):
        format_stats([])


def test_repetition_penalty_discourages_written_tokens_but_not_exempt_ones():
    import torch

    from solm.core.sampling import Sampler, SamplingConfig

    logits = torch.tensor([2.0, 1.9, -1.0, 1.95])
    greedy = Sampler(SamplingConfig())
    assert greedy(logits, history=[0]) == 0  # no penalty by default
    pen = Sampler(SamplingConfig(repetition_penalty=1.3), exempt=[3])
    assert pen(logits, history=[0]) == 3  # 2.0 / 1.3 < 1.95
    assert pen(logits, history=[0, 3]) == 3  # token 3 is exempt (a control token)
    assert pen(logits, history=[0, 3, 1]) == 3
    assert pen(logits, banned=torch.tensor([False, False, False, True]), history=[0]) == 1
    assert torch.equal(logits, torch.tensor([2.0, 1.9, -1.0, 1.95]))  # input untouched


def test_formatting_tokens_are_exempt_from_the_penalty(pasta_tokenizer):
    from solm.core.sampling import formatting_token_ids

    ids = set(formatting_token_ids(pasta_tokenizer))
    for piece in ["\n", "-", "1", ".", " "]:
        (tid,) = pasta_tokenizer(piece, add_special_tokens=False).input_ids
        assert tid in ids, piece
    for word in [" the", "Apple"]:
        assert not set(pasta_tokenizer(word, add_special_tokens=False).input_ids) & ids


def test_no_repeat_ngram_bans_exactly_the_repeating_continuations():
    import torch

    from solm.core.sampling import Sampler, SamplingConfig, repeated_ngram_continuations

    assert repeated_ngram_continuations([1, 2, 3, 1, 2], 3) == {3}
    assert repeated_ngram_continuations([1, 2, 1, 4, 1], 2) == {2, 4}
    assert repeated_ngram_continuations([1, 2, 3], 3) == set()  # "2 3" never seen before
    assert repeated_ngram_continuations([1, 2, 1, 2], 0) == set()
    logits = torch.tensor([0.0, 1.0, 3.0, 2.0, 2.5])
    ban = Sampler(SamplingConfig(no_repeat_ngram=2), always_allowed=[4])
    assert ban(logits, history=[1, 2, 1]) == 4  # 2 would repeat "1 2"
    assert ban(logits, history=[1, 4, 1, 2, 1]) == 4  # 4 repeats "1 4" but is always allowed
    assert Sampler(SamplingConfig(no_repeat_ngram=2))(logits, history=[1, 4, 1, 2, 1]) == 3
    assert torch.equal(logits, torch.tensor([0.0, 1.0, 3.0, 2.0, 2.5]))  # input untouched
    only = torch.tensor([False, False, True, True, True])
    # the last allowed token is never banned: better a repeat than no token at all
    assert ban(logits, banned=~torch.tensor([False, True, False, False, False]),
               history=[1, 1]) == 1
    assert ban(logits, banned=only, history=[1, 2, 1]) == 1
