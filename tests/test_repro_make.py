"""`make repro-cpu-*` is resumable through stamps: a finished step (its stamp newer than its
prerequisites') is not run again, everything after an unfinished one is, and neither the
stamps nor the steps' outputs can be deleted by make when a recipe is interrupted."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make_n(target: str, repro: Path, *extra: str) -> str:
    return subprocess.run(["make", "-n", target, f"REPRO={repro}", f"DATA={repro}/data",
                           *extra], cwd=ROOT, capture_output=True, text=True, check=True).stdout


_CLOCK = [time.time() - 1000]


def stamp(repro: Path, *names: str) -> None:
    """Stamps written in this order, a second apart (as steps finish one after another)."""
    for name in names:
        _CLOCK[0] += 1
        p = repro / name.replace("/", "/.done/", 1)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch()
        os.utime(p, (_CLOCK[0], _CLOCK[0]))


def test_a_fresh_run_runs_every_step(tmp_path):
    text = make_n("repro-cpu-pasta", tmp_path)
    for step in ("pasta annotate", "pasta mix", "--out " + f"{tmp_path}/pasta/pasta-sft",
                 "--strip-annotations", "pasta prefs", "pasta bonbon", "pasta eval run",
                 "pasta eval report", "solm repro report pasta"):
        assert step in text, step


def test_finished_steps_are_skipped_and_the_rest_run(tmp_path):
    stamp(tmp_path, "common/annotate", "common/mix", "pasta/sft", "common/baseline-sft",
          "pasta/heldout")
    text = make_n("repro-cpu-pasta", tmp_path)
    for done in ("pasta annotate", "pasta mix", f"--out {tmp_path}/pasta/pasta-sft",
                 "--strip-annotations", "heldout_prompts.py"):
        assert done not in text, done
    for todo in ("pasta prefs", "pasta bonbon", "pasta eval run", "solm repro report pasta"):
        assert todo in text, todo


def test_a_step_redone_upstream_reruns_what_depends_on_it(tmp_path):
    stamp(tmp_path, "common/annotate", "common/mix", "pasta/sft", "common/baseline-sft",
          "pasta/heldout", "pasta/prefs", "pasta/bonbon", "pasta/eval", "pasta/report")
    assert "pasta" not in make_n("repro-cpu-pasta", tmp_path).replace(str(tmp_path), "")
    stamp(tmp_path, "common/mix")  # the mix was made again: newer than what used it
    text = make_n("repro-cpu-pasta", tmp_path)
    assert "pasta annotate" not in text
    assert f"--out {tmp_path}/pasta/pasta-sft" in text and "pasta bonbon" in text


def test_stamps_and_outputs_are_precious(tmp_path):
    db = subprocess.run(["make", "-pn", "repro-cpu-tip", f"REPRO={tmp_path}"], cwd=ROOT,
                        capture_output=True, text=True).stdout
    precious = [line for line in db.splitlines() if line.startswith(".PRECIOUS:")]
    assert any(f"{tmp_path}/%" in line for line in precious), precious
