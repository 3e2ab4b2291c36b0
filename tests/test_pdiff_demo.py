"""`pdiff demo`: the chunks it marks and the side-by-side timing it prints."""

import re

import pytest

from solm.cli.pdiff_demo import chunk_pieces
from solm.decode.pdiff.demo import time_side_by_side


@pytest.mark.parametrize("annotated", [
    "Plan.<promise topic=\"a\" tokens=\"2\"/><async> one</async><async> two</async><sync/> End.",
    "<async>x</async>",
    "no chunk at all",
    "A<async>cut by the cap",
    "",
])
def test_chunk_pieces_join_back_and_mark_exactly_the_async_spans(annotated):
    pieces = chunk_pieces(annotated)
    assert "".join(t for t, _ in pieces) == annotated
    # the oracle: the characters inside <async>...</async> (an unclosed one runs to the end)
    inside = set()
    for m in re.finditer(r"<async>.*?(</async>|$)", annotated, flags=re.S):
        inside.update(range(m.start(), m.end()))
    at = 0
    for text, in_chunk in pieces:
        for i in range(at, at + len(text)):
            assert (i in inside) == in_chunk, (annotated, i)
        at += len(text)


def test_side_by_side_alternates_and_compares_the_fastest_of_each():
    calls = []
    pdiff_times, seq_times = iter([4.0, 2.0, 3.0]), iter([6.0, 5.0, 9.0])

    def pdiff():
        calls.append("p")
        return next(pdiff_times)

    def seq():
        calls.append("s")
        return next(seq_times)

    t = time_side_by_side(pdiff, seq, content_tokens=100, repeats=3)
    assert calls == ["p", "s", "s", "p", "p", "s"]
    assert t.pdiff_s == [4.0, 2.0, 3.0] and t.sequential_s == [6.0, 5.0, 9.0]
    assert t.pdiff_tokens_per_s == pytest.approx(50.0)
    assert t.sequential_tokens_per_s == pytest.approx(20.0)
    assert t.realized == pytest.approx(5.0 / 2.0)
    assert t.to_dict()["realized"] == 2.5


@pytest.mark.slow
def test_the_demo_times_the_kept_model_against_the_baseline_on_the_same_length(tmp_path):
    import json

    from typer.testing import CliRunner

    from solm.cli import pdiff
    from solm.core.chat import text_ids
    from solm.core.models import load_tokenizer

    out = tmp_path / "demo.json"
    r = CliRunner().invoke(pdiff.app, ["demo", "--repeats", "2", "--max-new-tokens", "96",
                                       "-o", str(out), "-q"])
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    tok = load_tokenizer()  # the embedded model's: a response holds no control token
    assert d["content_tokens"] == len(text_ids(tok, d["response"]))
    assert len(d["pdiff_s"]) == len(d["sequential_s"]) == 2
    assert d["realized"] == pytest.approx(min(d["sequential_s"]) / min(d["pdiff_s"]), rel=1e-2)
    assert d["forward_passes"] == d["plan_passes"] + d["denoise_passes"]
    assert d["annotated"].count("<async>") == len(d["chunks"]) > 0


def test_the_demo_records_the_weight_format_of_the_engine_it_ran_on():
    """A llama.cpp run records its GGUF type, not torch's dtype of the model it exported
    from; a torch run records the dtype."""
    from types import SimpleNamespace

    import torch

    from solm.cli.pdiff_demo import weight_format

    model = SimpleNamespace(dtype=torch.float32)
    llama = weight_format(SimpleNamespace(engine="llama.cpp", gguf_type="q8_0", onnx_type="q8"),
                          model)
    assert llama == {"dtype": None, "gguf_type": "q8_0", "onnx_type": None}
    ort = weight_format(SimpleNamespace(engine="onnxruntime", gguf_type="q8_0", onnx_type="i8"),
                        model)
    assert ort == {"dtype": None, "gguf_type": None, "onnx_type": "i8"}
    assert weight_format(SimpleNamespace(engine="torch", gguf_type="q8_0", onnx_type="q8"),
                         model)["dtype"] == "torch.float32"
