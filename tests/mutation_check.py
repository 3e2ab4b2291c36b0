"""Apply deliberate bugs to a copy of `solm/`, run the rule-pinning tests, report which fail.

    python tests/mutation_check.py [--out runs/mutations.json] [--only NAME ...]

Each mutation is a known-wrong reading of a rule (the ones that once slipped past the
train-vs-runtime consistency tests, where both sides shared the bug). The source tree is never
modified: each run copies the package and the tests into a temporary folder and runs pytest
there (so that copy is the `solm` the tests import).
A mutation that no test catches is reported and makes the script exit non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["tests/test_structure.py", "tests/test_oracles.py", "tests/test_runtime.py",
         "tests/test_collator.py", "tests/test_tip_structure.py", "tests/test_tip_runtime.py",
         "tests/test_policies.py", "tests/test_toy_policy.py", "tests/test_pasta_format.py"]

# name -> (file, exact text, replacement)
MUTATIONS: dict[str, tuple[str, str, str]] = {
    "sync_waits_for_any_block": (
        "solm/decode/pasta/runtime.py",
        "feed_main = all(t.pending == v.async_close for t in active)",
        "feed_main = any(t.pending == v.async_close for t in active)"),
    "promise_length_table_rotated": (
        "solm/core/systems/pasta.py",
        "close = {vocab[promise_close(n)]: n for n in range(1, MAX_PROMISE_TENS + 1)}",
        "close = {vocab[promise_close(n)]: n % MAX_PROMISE_TENS + 1 "
        "for n in range(1, MAX_PROMISE_TENS + 1)}"),
    "tip_never_evicts": (
        "solm/decode/tip/policies.py",
        "        dead = req.tracker.dead  # type: ignore[attr-defined]\n",
        "        return []\n        dead = req.tracker.dead  # type: ignore[attr-defined]\n"),
    "pred_10x_dropped": (
        "solm/core/systems/pasta.py",
        "self.main_pos += 1 + 10 * v.close_tens[tok]",
        "self.main_pos += 1"),
    "block_starts_one_late": (
        "solm/core/systems/pasta.py",
        "next_pos=pos + 1)",
        "next_pos=pos + 2)"),
    "promise_predicts_async": (
        "solm/core/systems/pasta.py",
        "    return attrs, targets\n",
        "    for i in range(len(token_ids) - 1):\n"
        "        if int(token_ids[i]) in vocab.close_tens and attrs[i].thread == MAIN:\n"
        "            targets[i] = int(token_ids[i + 1])\n"
        "    return attrs, targets\n"),
}


def copy_tree(dest: Path) -> Path:
    for part in ("solm", "tests"):
        shutil.copytree(ROOT / part, dest / part,
                        ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def run_tests(root: Path, tests: list[str]) -> tuple[int, list[str], str]:
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider",
           "-rf", *tests]
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    failed = sorted(set(re.findall(r"^FAILED (\S+)", r.stdout, re.M)))
    summary = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-300:]
    return r.returncode, failed, summary


def mutated_copy(name: str, workdir: Path) -> Path:
    dest = copy_tree(workdir / name)
    path, old, new = MUTATIONS[name]
    target = dest / path
    text = target.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"mutation {name}: expected the text once in {path}, found "
                         f"{text.count(old)} times (the code moved: update the mutation)")
    target.write_text(text.replace(old, new))
    return dest


def imported_from(root: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", "import solm; print(solm.__file__)"], cwd=root,
                          env=env, capture_output=True, text=True).stdout.strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "mutations.json")
    p.add_argument("--only", nargs="*", default=None)
    args = p.parse_args()
    names = args.only or list(MUTATIONS)
    report: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        clean = copy_tree(work / "clean")
        if not imported_from(clean).startswith(str(clean)):
            raise SystemExit(f"the copy is not what imports as solm ({imported_from(clean)})")
        code, failed, summary = run_tests(clean, TESTS)
        report["(no mutation)"] = {"failed": failed, "summary": summary}
        print(f"(no mutation): {summary}", flush=True)
        if code != 0:
            print("the unmutated tests fail; fix them first")
            return 2
        for name in names:
            code, failed, summary = run_tests(mutated_copy(name, work), TESTS)
            report[name] = {"failed": failed, "summary": summary}
            print(f"{name}: {len(failed)} failing tests ({summary})", flush=True)
            for f in failed:
                print(f"    {f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    uncaught = [n for n in names if not report[n]["failed"]]
    if uncaught:
        print(f"NOT CAUGHT: {', '.join(uncaught)}")
    return 1 if uncaught else 0


if __name__ == "__main__":
    sys.exit(main())
