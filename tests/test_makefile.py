"""The Makefile a user reads: short, its targets listed by `make help`, the recipes behind
the kept models under recipes/, every target named for what it builds."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
USER_TARGETS = {"setup", "demo", "tip-demo", "pdiff-demo", "test", "test-slow", "docs", "data",
                "repro-cpu", "repro-cpu-pasta", "repro-cpu-tip", "repro-cpu-pdiff",
                "repro-paper", "repro-pasta-paper", "repro-tip-paper", "repro-pdiff-paper",
                "kept-models", "help", "help-recipes"}
# a target named for when or by whom it was made, not for what it builds: a letter or
# three followed by digits (a work-log number), or words of a log
LOG_LABEL = re.compile(r"^(?:[a-z]{1,3}\d+|wave|issue|session|stop|tmp|new|old|todo|v\d+)$")


def make(*args: str) -> str:
    return subprocess.run(["make", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def all_targets() -> set[str]:
    """Every explicit target make knows from the Makefile and the files it includes (its
    database, so an included file's targets count)."""
    db = subprocess.run(["make", "-pRrq", "-f", "Makefile", "__none__"], cwd=ROOT,
                        capture_output=True, text=True).stdout
    names = set()
    for line in db.split("\n"):
        m = re.match(r"^([a-zA-Z0-9][a-zA-Z0-9_-]*):(?!=)", line)
        if m and not line.startswith(("#", "\t")):
            names.add(m.group(1))
    return names


def test_the_user_facing_makefile_is_short():
    assert len((ROOT / "Makefile").read_text().splitlines()) <= 400


def test_make_help_lists_every_user_target_with_what_it_does():
    listed = {}
    for line in make("help").splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and not line.lstrip().startswith("("):
            listed[parts[0]] = parts[1]
    assert USER_TARGETS <= set(listed), USER_TARGETS - set(listed)
    assert all(len(listed[t]) > 10 for t in USER_TARGETS)
    recipes = make("help-recipes")
    for target in ("own-kept-cpu", "own-pdiff-kept-cpu", "tip-sft-cpu", "tip-dense-cpu",
                   "tip-grpo-cpu", "tip-sft-16-cpu"):
        assert re.search(rf"^\s+{target}\s+\S", recipes, re.M), target


def test_no_target_name_encodes_a_work_log_label():
    targets = all_targets()
    assert len(targets) > 60 and USER_TARGETS <= targets
    labelled = sorted(t for t in targets if any(LOG_LABEL.match(part) for part in t.split("-")))
    assert not labelled, labelled


def test_the_oracle_for_work_log_labels_fires():
    assert all(any(LOG_LABEL.match(p) for p in t.split("-"))
               for t in ("p36-mix", "w7-final", "recipe-v2", "tmp-run", "own-s12"))
    assert not any(any(LOG_LABEL.match(p) for p in t.split("-"))
                   for t in ("repro-cpu", "tip-bench-tracking-cpu", "speed-rows-mix", "gpu-check"))


def test_every_kept_model_names_the_target_that_rebuilds_it():
    from solm.core.models import ARTIFACT_TARGETS, ARTIFACTS

    targets = all_targets()
    assert set(ARTIFACT_TARGETS) == set(ARTIFACTS)
    missing = {m: t for m, t in ARTIFACT_TARGETS.items() if t not in targets}
    assert not missing, missing
    kept = make("-n", "kept-models")
    for name in ARTIFACTS:  # each is packed into the package by that chain
        assert f"solm/artifacts/{name}" in kept, name


def test_every_make_target_the_docs_name_exists():
    targets = all_targets()
    named = set()
    for doc in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), ROOT / "bench" / "README.md"]:
        named |= {m.group(1) for m in re.finditer(r"`make ([a-z][a-z0-9-]+)", doc.read_text())}
    assert named and not (named - targets), sorted(named - targets)
