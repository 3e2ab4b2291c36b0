"""bench/gpu_decode.py runs every section end to end (on the CPU, tiny shapes, `--smoke`), so
the script a GPU session runs once has run before it gets there. Its numbers mean nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANSWER = ('Tips:\\n1.<promise topic=\\"sleep\\" tokens=\\"2\\"/><async> Sleep well every '
          'night.</async>\\n2.<promise topic=\\"food\\" tokens=\\"1\\"/><async> Eat greens.'
          '</async><sync/> Done.')


def test_every_section_runs_and_writes_its_rows(tmp_path, pasta_tokenizer):
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_decode

    import shutil

    from solm.core.models import resolve_model_path

    tok_dir = tmp_path / "tok"  # what `make gpu-decode-inputs` carries: no weights
    tok_dir.mkdir()
    for f in Path(resolve_model_path("smollm2-135m")).iterdir():
        if f.suffix in (".json", ".jinja"):
            shutil.copy(f, tok_dir)
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(f'{{"id": "{i}", "prompt": "Question {i}?", '
                               f'"annotated": "{ANSWER}"}}\n' for i in range(2)))
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps({"prompt": "Track a = 1.", "response": "x",
                                  "annotated": "<reg_0>a is 1.\n<reg_1>a is 2.\n<reg_0>a is 3."
                                               " Answer 3."}) + "\n")
    out = tmp_path / "gpu.json"
    gpu_decode.main(["--tokenizer", str(tok_dir), "--device", "cpu", "--smoke",
                     "--batches", "1,2", "--new-tokens", "6", "--contexts", "6,20",
                     "--long-batches", "1", "--replayed",
                     "--pasta-answers", str(answers), "--pasta-batches", "2",
                     "--tip-traces", str(traces), "--out", str(out)])
    summary = json.loads(out.read_text())
    rows = summary["rows"]
    seq = [r for r in rows if r["section"] == "sequential"]
    assert [r["section"] for r in rows] == ["sequential"] * 6 + ["pasta", "tip"]
    assert [(r["context"], r["batch"], r["sampling"] == "replayed") for r in seq] == [
        (6, 1, False), (6, 1, True), (6, 2, False), (6, 2, True), (20, 1, False), (20, 1, True)]
    assert not [k for r in rows for k in r if k.endswith("error")]
    assert all(r["solm_tokens_per_s"] > 0 and r["generate_tokens_per_s"] > 0
               and r["solm_spread"] >= 0 for r in seq)
    assert rows[6]["realized_speedup"] > 0 and rows[7]["tip_live_tokens"] > 0
    assert summary["skipped"] == [] and summary["device"] == "cpu"
    assert len(summary["verdicts"]) == 8 and "context 20 batch 1 sampled" in summary["verdicts"][4]


def test_each_side_is_timed_three_times_in_alternating_order(monkeypatch):
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_decode

    calls = []
    durations = {"solm": iter([3.0, 2.0, 4.0]), "generate": iter([5.0, 6.0, 10.0])}
    monkeypatch.setattr(gpu_decode, "timed", lambda fn, device: fn())

    def side(name):
        def run():
            calls.append(name)
            return next(durations[name])
        return run

    got = gpu_decode.repeated({"solm": side("solm"), "generate": side("generate")}, "cpu")
    assert calls == ["solm", "generate", "generate", "solm", "solm", "generate"]
    assert got["solm"] == (2.0, 4.0 / 2.0 - 1) and got["generate"] == (5.0, 10.0 / 5.0 - 1)
