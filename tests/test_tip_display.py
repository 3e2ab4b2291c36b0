"""What `tip decode` shows of a decode: its steps with their registers and which later step's
register reuse killed each (the rule written a second way), and, for a problem that carries
its answer, the check by the verifier the reward uses."""

import json
import random

import pytest
from typer.testing import CliRunner

from solm.core.records import Record
from solm.decode.tip.decode_file import register_steps, result_row
from solm.decode.tip.runtime import TipResult


@pytest.fixture(scope="module")
def vocab(tip_tok):
    from solm.core.systems.tip import TipVocab

    return TipVocab.from_tokenizer(tip_tok, 4)


def response(tok, vocab, regs: list[int], texts: list[str]) -> list[int]:
    from solm.core.chat import text_ids

    by_index = {i: t for t, i in vocab.registers.items()}
    ids = []
    for r, text in zip(regs, texts):
        ids += [by_index[r]] + text_ids(tok, text)
    return ids


@pytest.mark.parametrize("seed", range(8))
def test_each_step_is_killed_by_the_next_step_that_takes_its_register(seed, tip_tok, vocab):
    rng = random.Random(seed)
    regs = [rng.randrange(4) for _ in range(rng.randint(1, 12))]
    texts = [f" Step {i} says {rng.randint(0, 99)}." for i in range(len(regs))]
    steps = register_steps(response(tip_tok, vocab, regs, texts), vocab, tip_tok)
    assert [s["register"] for s in steps] == regs
    assert [s["text"] for s in steps] == texts
    for i, r in enumerate(regs):
        later = [j for j in range(i + 1, len(regs)) if regs[j] == r]
        assert steps[i]["killed_by"] == (later[0] + 1 if later else None)  # steps count from 1


def _result(ids) -> TipResult:
    return TipResult(rid=0, ids=ids, flags=[], generated=len(ids), mean_live_tokens=10.0,
                     mean_live_response_tokens=5.0, peak_pages=2, peak_live_tokens=12,
                     slots_allocated=32, prefill_s=0.1, decode_s=0.2)


@pytest.mark.parametrize("boxed,correct", [("9", True), ("8", False), ("09", True)])
def test_a_problem_with_its_answer_is_graded_by_the_tasks_verifier(boxed, correct, tip_tok,
                                                                   vocab):
    ids = response(tip_tok, vocab, [0, 1], [" We start.", f" So the answer is \\boxed{{{boxed}}}."])
    rec = Record(id="tracking-s2-1", prompt="p", meta={"answer": "9", "task": "tracking"})
    row = result_row(rec, 0, _result(ids), tip_tok, "tip", vocab)
    assert row["correct"] is correct and row["gold"] == "9"
    plain = result_row(Record(id="x", prompt="p"), 0, _result(ids), tip_tok, "tip", vocab)
    assert "correct" not in plain and len(plain["steps"]) == 2


def test_a_one_problem_file_decode_shows_the_steps_and_the_check(tmp_path, tiny_folder):
    from solm.cli import tip
    from solm.decode.tip.system import row_figures, steps_text

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "t", "question": "Track a = 1. What is a?",
                                   "answer": "1", "task": "tracking"}) + "\n")
    out = tmp_path / "o.jsonl"
    r = CliRunner().invoke(tip.app, ["decode", "-m", tiny_folder, "-p", str(prompts), "-o",
                                     str(out), "--registers", "4", "--max-new-tokens", "24",
                                     "--temperature", "0", "--page-size", "8"])
    assert r.exit_code == 0, r.output
    row = json.loads(out.read_text())
    assert row["gold"] == "1" and row["correct"] is False  # a random model boxes nothing
    said = " ".join(r.stderr.split())
    assert " ".join(row_figures(row).split()) in said and "expected 1: wrong" in said
    assert all(" ".join(line.split()) in said for line in steps_text(row).splitlines()
               if line.strip())


def test_a_shown_row_prints_each_steps_fate_in_brackets(tip_tok, vocab):
    """The console line of a written row keeps `[killed by step 2]` and `[live to the end]`:
    text the model's steps never control, and rich must not read as markup."""
    from rich.console import Console

    from solm.cli.decode_command import shown_row
    from solm.decode.registry import decode_system

    ids = response(tip_tok, vocab, [0, 0, 1], [" First [b] step.", " Second.", " Third."])
    row = result_row(Record(id="t[1]", prompt="p"), 0, _result(ids), tip_tok, "tip", vocab)
    console = Console(record=True, width=200)
    console.print(shown_row(decode_system("tip"), row))
    text = console.export_text()
    assert "[killed by step 2]" in text and text.count("[live to the end]") == 2
    assert "t[1]" in text and "First [b] step." in text


def test_the_decode_summary_counts_steps_and_live_kv_as_tip_eval_does(tip_tok, vocab):
    """Three samples of different lengths: the summary's live KV is the mean of the samples'
    means (as `tip eval` averages), not weighted by tokens; its reasoning steps are the
    registers the samples opened, its decode passes the tokens decoded."""
    from dataclasses import replace

    from solm.decode.tip.config import TipDecodeConfig
    from solm.decode.tip.decode_file import TipSummary
    from solm.eval.tip_eval import summarise

    summary = TipSummary.start(TipDecodeConfig())
    rows, lives = [], [100.0, 300.0, 200.0]
    for k, (regs, live) in enumerate(zip([[0, 1], [0, 0, 1, 1, 0], [1]], lives)):
        ids = response(tip_tok, vocab, regs, [f" step {i} text" * (k + 1) for i in regs])
        res = replace(_result(ids), mean_live_tokens=live)
        row = result_row(Record(id=f"p{k}", prompt="p"), 0, res, tip_tok, "tip", vocab)
        summary.add(row, res, None, 1.0)
        rows.append({"data": "d", "id": f"p{k}", "policy": "tip", "budget": None, "sample": 0,
                     "correct": True, "generated": res.generated, "mean_live_tokens": live,
                     "live_response_tokens": live, "decode_s": 1.0, "registers_opened": 1,
                     "steps_killed": 0, "flags": []})
    d = summary.to_dict()
    assert d["mean_live_tokens"] == pytest.approx(sum(lives) / 3) == summarise(rows, [])[0][
        "mean_live_tokens"]
    assert d["reasoning_steps"] == 2 + 5 + 1 and d["steps_killed"] == 0 + 3 + 0
    assert d["decode_passes"] == d["generated_tokens"] == sum(r["generated"] for r in rows)
