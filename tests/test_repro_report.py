"""`solm repro report` / `table`: figures come from the run's own files (checked against
values written into a synthetic run), step minutes are the gaps between stamps across the
whole run, and the README table replaces only the text between its markers."""

import json
import os
from pathlib import Path

import pytest

from solm.core.errors import SolmError
from solm.eval.repro_report import (TABLE_BEGIN, TABLE_END, repro_table, step_times,
                                    update_readme, write_report)


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _trained(folder: Path, losses: list[float], minutes: float) -> None:
    log = [{"step": 5 * (i + 1), "eval_loss": x} for i, x in enumerate(losses)]
    log.append({"step": 5 * len(losses), "train_runtime": minutes * 60})
    _jsonl(folder / "train_log.jsonl", log)
    (folder / "solm.json").write_text(json.dumps({"complete": True}))


def _stamp(folder: Path, name: str, t: float) -> None:
    p = folder / ".done" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.touch()
    os.utime(p, (t, t))


def _method(kind, speedup, win, tokens=50.0):
    return {"kind": kind, "speed": {"prompts": 4, "theoretical_speedup": {"geomean": speedup},
                                    "passes_per_token_reduction": {"geomean": 1.0},
                                    "content_tokens_mean": tokens},
            "vs_baseline": {"win_rate": win, "lc_win_rate": win}}


@pytest.fixture
def pasta_run(tmp_path):
    repro = tmp_path / "repro"
    common, run = repro / "common", repro / "pasta"
    _jsonl(common / "dolly_rules.jsonl", [{"promises": p} for p in (0, 2, 3, 0, 1, 2, 0, 0)])
    _jsonl(common / "sft_rows.jsonl", [{"promises": p} for p in (2, 3, 2, 0)])
    for folder, losses, minutes in ((run / "pasta-sft", [3.0, 2.0], 4.0),
                                    (common / "baseline-sft", [2.5, 1.5], 3.0),
                                    (run / "bonbon", [0.7, 0.6], 1.0)):
        _trained(folder, losses, minutes)
    (run / "prefs").mkdir(parents=True)
    (run / "prefs" / "summary.json").write_text(json.dumps(
        {"prompts": 4, "samples": 16, "pairs": 3, "well_formed_rate": 0.75,
         "chosen_mean_speedup": 2.5, "rejected_mean_speedup": 0.5, "quality_weight": 0.0}))
    (run / "eval").mkdir()
    (run / "eval" / "summary.json").write_text(json.dumps({
        "baseline": "baseline-sft", "judge": "hf:smollm2-135m",
        "machine": {"cpu": "test cpu", "torch": "x", "threads": 2},
        "methods": {"baseline-sft": _method("sequential", 1.0, 50.0),
                    "pasta-sft": _method("pasta", 1.37, 41.5),
                    "pasta-bonbon": _method("pasta", 1.81, 38.25)}}))
    t0 = 1_700_000_000
    for i, (folder, name) in enumerate([(common, "annotate"), (common, "mix"), (run, "sft"),
                                        (common, "baseline-sft"), (run, "report")]):
        _stamp(folder, name, t0 + 60 * (i * i))  # gaps: 1, 3, 5, 7 minutes
    return repro


def test_pasta_report_reads_the_run(pasta_run):
    path = write_report("pasta", pasta_run / "pasta", pasta_run / "common")
    text = path.read_text()
    summary = json.loads((pasta_run / "pasta" / "summary.json").read_text())
    assert "| dolly_rules.jsonl | 8 | 3 | 38% |" in text  # 3 of 8 rows have >= 2 promises
    assert "SFT mix: 4 rows, 3 of them parallel" in text
    assert "| Pasta-SFT | 10 | 4.0 | 3.00 | 2.00 |" in text
    assert "| pasta-bonbon | pasta | 1.81x |" in text
    assert "agree with AlpacaEval's GPT-4 annotations at chance" in text.replace("\n", " ")
    assert summary["prefs"]["pairs"] == 3
    assert [s["minutes"] for s in summary["steps"]] == [None, 1.0, 3.0, 5.0, 7.0]
    table = repro_table(pasta_run)
    assert ("pasta-sft: content tokens per forward pass 1.00x Baseline-SFT's, theoretical "
            "speedup 1.37x, win rate 41.5; pasta-bonbon: content tokens per forward pass 1.00x "
            "Baseline-SFT's, theoretical speedup 1.81x, win rate 38.2") in table
    assert "| 16 |" in table  # minutes: the gaps summed (the first stamp has none)


def test_step_gaps_span_every_system_folder(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _stamp(a, "one", 1000)
    _stamp(b, "two", 1000 + 600)
    _stamp(a, "three", 1000 + 660)
    got = [(n, g) for n, _, g in step_times(a)]
    assert got == [("a/one", None), ("a/three", 1.0)]  # b's step is not a's time


def test_missing_step_output_is_named(tmp_path):
    (tmp_path / "pasta").mkdir()
    with pytest.raises(SolmError, match="eval/summary.json: not found"):
        write_report("pasta", tmp_path / "pasta", tmp_path / "common")


def test_update_readme_replaces_only_the_marked_table(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{TABLE_BEGIN}\nold\n{TABLE_END}\noutro\n")
    update_readme(readme, "| new |")
    assert readme.read_text() == f"intro\n{TABLE_BEGIN}\n| new |\n{TABLE_END}\noutro\n"
    readme.write_text("no markers")
    with pytest.raises(SolmError, match="markers"):
        update_readme(readme, "x")


def test_step_minutes_come_from_the_start_file_when_there_is_one(tmp_path):
    a = tmp_path / "a"
    _stamp(a, "one", 1000)
    _stamp(a, "two", 1000 + 900)  # 15 minutes after "one"...
    (a / ".done" / "two.start").write_text(str(1000 + 780) + "\n")  # ...but began at 13
    got = [(n, g) for n, _, g in step_times(a)]
    assert got == [("a/one", None), ("a/two", 2.0)]  # .start files are not steps
