"""A planted-bug audit written by no one: one-line bugs drawn at random from a module's code
(a flipped comparison, an off-by-one, a swapped min/max or and/or, a dropped `not`, a wrong
boolean default, a call's result thrown away) and run against every test file that names
the module. Unlike `mutation_check.py` (bugs chosen by the author of the code they test), it
says how much of a module's behaviour the tests pin down.

    python tests/mutation_audit.py solm/prefs/score.py [more modules] [--per-module 10]
        [--seed 0] [--tests tests/test_x.py ...] [--out runs/audit.json]

Each mutant runs in a copy of the package and the tests (the tree is never modified); a
mutant no test fails is printed with its line. Exit status: 0 when at least `--target` of
the mutants were caught.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SWAPS = [(" < ", " <= "), (" <= ", " < "), (" > ", " >= "), (" >= ", " > "),
         (" == ", " != "), (" != ", " == "), (" and ", " or "), (" or ", " and "),
         ("min(", "max("), ("max(", "min("), (" + 1", " - 1"), (" - 1", " + 1"),
         ("True", "False"), ("False", "True"), ("not ", ""), (" + ", " - "), (" - ", " + "),
         ("[0]", "[1]"), ("[-1]", "[0]"), (" * ", " / ")]
NUMBER = re.compile(r"(?<![\w.])(\d+)(?![\w.])")


@dataclass
class Mutant:
    path: str
    line: int
    before: str
    after: str
    kind: str


def code_lines(source: str) -> set[int]:
    """Line numbers holding code: not docstrings, comments, imports or decorators."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            skip.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            doc = body[0]
            skip.update(range(doc.lineno, (doc.end_lineno or doc.lineno) + 1))
    lines = source.splitlines()
    return {i + 1 for i, text in enumerate(lines)
            if text.strip() and not text.strip().startswith(("#", "@", "class ", "def "))
            and i + 1 not in skip}


def candidates(path: Path) -> list[Mutant]:
    source = path.read_text()
    lines = source.splitlines()
    out = []
    for n in sorted(code_lines(source)):
        text = lines[n - 1]
        code = text.split("  #")[0]
        for a, b in SWAPS:
            if a in code:
                out.append(Mutant(str(path.relative_to(ROOT)), n, text,
                                  text.replace(a, b, 1), f"{a.strip()} -> {b.strip()}"))
        for m in NUMBER.finditer(code):
            if code[max(0, m.start() - 1)] in "\"'":
                continue
            value = int(m.group(1))
            out.append(Mutant(str(path.relative_to(ROOT)), n, text,
                              text[:m.start()] + str(value + 1) + text[m.end():],
                              f"{value} -> {value + 1}"))
        stripped = code.strip()
        if re.match(r"^[\w.]+\(.*\)$", stripped) and not stripped.startswith(("print(",
                                                                              "raise")):
            indent = text[:len(text) - len(text.lstrip())]
            out.append(Mutant(str(path.relative_to(ROOT)), n, text, indent + "pass",
                              "call dropped"))
    return [m for m in out if compiles(path, m)]


def compiles(path: Path, m: Mutant) -> bool:
    lines = path.read_text().splitlines()
    lines[m.line - 1] = m.after
    try:
        ast.parse("\n".join(lines))
        return True
    except SyntaxError:
        return False


def naming_tests(module: str) -> list[str]:
    """Test files that name the module (by dotted name or by its last part)."""
    dotted = module.removesuffix(".py").replace("/", ".")
    stem = Path(module).stem
    if stem == "__init__":  # a package's own code: tests that import from the package itself
        package = dotted.removesuffix(".__init__")
        names = re.compile(rf"\bfrom {re.escape(package)} import\b|"
                           rf"\bimport {re.escape(package)}\b(?!\.)")
    else:
        names = re.compile(rf"{re.escape(dotted)}|\bimport\b[^\n]*\b{stem}\b")
    return [str(test.relative_to(ROOT)) for test in sorted((ROOT / "tests").glob("test_*.py"))
            if names.search(test.read_text())]


def run_mutant(m: Mutant, tests: list[str], timeout: int) -> bool:
    """True when some test fails with the mutant applied (caught)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in ("solm", "tests", "pyproject.toml", "configs"):
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, work / name, ignore=shutil.ignore_patterns(
                    "__pycache__", "artifacts"))
            elif src.exists():
                shutil.copy(src, work / name)
        (work / "solm" / "artifacts").symlink_to(ROOT / "solm" / "artifacts")
        target = work / m.path
        lines = target.read_text().splitlines(keepends=True)
        ending = "\n" if lines[m.line - 1].endswith("\n") else ""
        lines[m.line - 1] = m.after + ending
        target.write_text("".join(lines))
        env = {"PYTHONPATH": str(work), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
        import os

        env = {**os.environ, **env}
        try:
            r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p",
                                "no:cacheprovider", "-m", "not slow", *tests], cwd=work,
                               env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return True  # a hang is a failure a user would see
        return r.returncode != 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("modules", nargs="+")
    ap.add_argument("--per-module", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tests", nargs="*", default=None)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    results = []
    for module in args.modules:
        tests = args.tests or naming_tests(module)
        pool = candidates(ROOT / module)
        chosen = rng.sample(pool, min(args.per_module, len(pool)))
        for m in chosen:
            caught = run_mutant(m, tests, args.timeout)
            results.append({**m.__dict__, "caught": caught, "tests": tests})
            print(f"{'caught ' if caught else 'MISSED '} {m.path}:{m.line} {m.kind}: "
                  f"{m.after.strip()[:90]}", flush=True)
    caught = sum(r["caught"] for r in results)
    print(f"{caught} of {len(results)} caught ({caught / max(1, len(results)):.0%})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0 if caught >= args.target * len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
