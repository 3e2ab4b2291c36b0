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
                     "--batches", "1,2", "--new-tokens", "6", "--prompt-tokens", "6",
                     "--pasta-answers", str(answers), "--pasta-batches", "2",
                     "--tip-traces", str(traces), "--out", str(out)])
    summary = json.loads(out.read_text())
    rows = summary["rows"]
    assert [r["section"] for r in rows] == ["sequential", "sequential", "pasta", "tip"]
    assert not [k for r in rows for k in r if k.endswith("error")]
    assert all(r["solm_tokens_per_s"] > 0 and r["generate_tokens_per_s"] > 0
               for r in rows[:2])
    assert rows[2]["realized_speedup"] > 0 and rows[3]["tip_live_tokens"] > 0
    assert summary["skipped"] == [] and summary["device"] == "cpu"
