import pytest

from solm.eval.pasta_format import format_stats, is_well_formed

GOOD = '1.<promise topic="a" tokens="1"/><async> A.</async>\n2.<promise topic="b" tokens="1"/>' \
       '<async> B.</async><sync/>'


def row(annotated, content, critical, promises, flags=(), decode_s=1.0):
    return {"annotated": annotated, "content_tokens": content, "critical_path": critical,
            "promises": promises, "flags": list(flags), "decode_s": decode_s}


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
    rows = [row(GOOD, 20, 10, 2), row("plain", 10, 10, 0), row("<async>", 8, 8, 0),
            row(GOOD, 30, 10, 2, ["max_new_tokens"])]
    st = format_stats(rows)
    assert st.rows == 4 and st.well_formed == 0.75 and st.with_promise == 0.5
    assert st.mean_parallelism_with_promise == pytest.approx((2.0 + 3.0) / 2)
    assert st.geomean_parallelism == pytest.approx((2 * 1 * 1 * 3) ** 0.25)
    assert st.hit_max_tokens == 0.25 and st.tokens_per_s == pytest.approx(68 / 4)
    with pytest.raises(ValueError):
        format_stats([])
