"""No command writes over a file it reads: its output, manifest, summary, plot or rejects
path may not be one of its inputs, spelled directly or through a link. Every command of
every app that takes a file is swept (a new command fails `test_every_file_command_is_swept`
until it is added here), and each refusal leaves the input byte for byte as it was."""

import inspect
import json
import os
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from solm.cli import main as solm_main

runner = CliRunner()
ROW = json.dumps({"id": "a", "prompt": "hi", "response": "Hello there.",
                  "annotated": "Hello there.", "instruction": "hi", "output": "x"}) + "\n"
FILE_NAMES = {"input", "data", "prompts", "source", "annotated", "traces_file", "out", "output"}

# command -> cases: (args, the input file that must survive); {X} is an input file, {L} a
# link to it, {d} the case's folder
CASES: dict[str, list[tuple[list[str], str]]] = {
    "pasta annotate": [
        (["-i", "{X}", "-o", "{X}"], "{X}"),
        (["-i", "{X}", "-o", "{L}"], "{X}"),
        (["-i", "{X}", "-o", "{d}/a.jsonl", "--rejects", "{L}"], "{X}"),
        (["-i", "{d}/a.jsonl.manifest.json", "-o", "{d}/a.jsonl"], "{d}/a.jsonl.manifest.json"),
        (["-i", "{d}/a.rejects.jsonl", "-o", "{d}/a.jsonl"], "{d}/a.rejects.jsonl"),
    ],
    "pasta decode": [
        (["-p", "{X}", "-o", "{L}"], "{X}"),
        (["-p", "{d}/o.jsonl.manifest.json", "-o", "{d}/o.jsonl"], "{d}/o.jsonl.manifest.json"),
    ],
    "pasta bench": [
        (["-a", "{X}", "-o", "{X}"], "{X}"),
        (["-a", "{X}", "-o", "{L}"], "{X}"),
        (["-a", "{d}/b.jsonl.summary.json", "-o", "{d}/b.jsonl"], "{d}/b.jsonl.summary.json"),
        (["-a", "{d}/b.jsonl.png", "-o", "{d}/b.jsonl"], "{d}/b.jsonl.png"),
        (["-a", "{d}/b.jsonl.manifest.json", "-o", "{d}/b.jsonl"], "{d}/b.jsonl.manifest.json"),
    ],
    "pasta judge": [
        (["-b", "{X}", "-m", "{d}/m.jsonl", "-o", "{L}"], "{X}"),
        (["-b", "{d}/m.jsonl", "-m", "{X}", "-o", "{d}/j.jsonl", "--rejects", "{L}"], "{X}"),
        (["-b", "{d}/j.jsonl.manifest.json", "-m", "{d}/m.jsonl", "-o", "{d}/j.jsonl"],
         "{d}/j.jsonl.manifest.json"),
    ],
    "pasta sft": [
        (["--data", "{X}", "--out", "{L}"], "{X}"),
        (["--data", "{d}/run/rows.jsonl", "--out", "{d}/run"], "{d}/run/rows.jsonl"),
    ],
    "pasta bonbon": [
        (["--data", "{X}", "--out", "{L}"], "{X}"),
        (["--data", "{d}/run/pairs.jsonl", "--out", "{d}/run"], "{d}/run/pairs.jsonl"),
    ],
    "pasta prefs": [
        (["-p", "{X}", "-o", "{L}"], "{X}"),
        (["-p", "{d}/o/samples.jsonl", "-o", "{d}/o"], "{d}/o/samples.jsonl"),
        (["-p", "{X}", "-o", "{d}/o", "--baseline", "{d}/o/baseline.jsonl"],
         "{d}/o/baseline.jsonl"),
    ],
    "pasta distill": [
        (["-p", "{d}/o/answers.jsonl", "-o", "{d}/o"], "{d}/o/answers.jsonl"),
        (["-p", "{X}", "-o", "{d}/o", "--exclude", "{d}/o/rows.jsonl"], "{d}/o/rows.jsonl"),
    ],
    "pdiff distill": [
        (["--data", "{d}/o/rows.jsonl", "-o", "{d}/o"], "{d}/o/rows.jsonl"),
    ],
    "pasta eval run": [
        (["-o", "{d}/run", "--method", "sequential=x", "--reference", "{d}/run/ref.jsonl"],
         "{d}/run/ref.jsonl"),
        (["-o", "{d}/run", "--method", "sequential=x", "-p", "{d}/run/outputs/sequential.jsonl"],
         "{d}/run/outputs/sequential.jsonl"),
    ],
    "pasta eval agreement": [
        (["-a", "{X}", "-o", "{L}"], "{X}"),
        (["-a", "{d}/r.judgments.jsonl", "-o", "{d}/r.json"], "{d}/r.judgments.jsonl"),
    ],
    "pasta eval report": [
        (["{d}/run", "-o", "{d}/rep", "--gamed-csv", "{d}/rep/report.md"], "{d}/rep/report.md"),
        (["{d}/run", "--gamed-csv", "{d}/run/summary.json"], "{d}/run/summary.json"),
    ],
    "tip decode": [
        (["-p", "{X}", "-o", "{L}"], "{X}"),
        (["-p", "{d}/t.jsonl.manifest.json", "-o", "{d}/t.jsonl"], "{d}/t.jsonl.manifest.json"),
    ],
    "tip traces": [
        (["--source", "{X}", "-o", "{X}"], "{X}"),
        (["--source", "{X}", "-o", "{L}"], "{X}"),
    ],
    "tip bench": [
        (["-t", "{X}", "-o", "{X}"], "{X}"),
        (["-t", "{X}", "-o", "{L}"], "{X}"),
        (["-t", "{d}/s.png", "-o", "{d}/s.json"], "{d}/s.png"),
    ],
    "data get": [
        (["dolly", "--from", "{d}/dolly.jsonl", "--data-dir", "{d}", "--force"],
         "{d}/dolly.jsonl"),
        (["dolly", "--from", "{d}/SOURCE.json", "--data-dir", "{d}"], "{d}/SOURCE.json"),
    ],
}
CASES["tip annotate"] = CASES["pasta annotate"]
CASES["tip sft"] = CASES["pasta sft"]
CASES["pdiff sft"] = CASES["pasta sft"]
CASES["pdiff decode"] = CASES["pasta decode"]
CASES["tip grpo"] = [
    (["--data", "{X}", "--out", "{L}"], "{X}"),
    (["--data", "{d}/run/problems.jsonl", "--out", "{d}/run"], "{d}/run/problems.jsonl"),
]
CASES["tip eval run"] = [
    (["-o", "{d}/run", "--data", "{d}/run/samples.jsonl"], "{d}/run/samples.jsonl"),
    (["-o", "{d}/run", "--data", "{d}/run/timing.jsonl"], "{d}/run/timing.jsonl"),
]
CASES["judge"] = CASES["pasta judge"]  # `solm judge` is the same command
CASES["pasta mix"] = [
    (["{X}", "-o", "{X}"], "{X}"),
    (["{X}", "-o", "{L}"], "{X}"),
]
CASES["merge"] = [(["{X}", "-p", "{L}"], "{X}")]
CASES["export gguf"] = [(["{X}", "{X}"], "{X}"), (["{X}", "{L}"], "{X}")]
CASES["check-engines"] = [(["-p", "{X}", "-o", "{X}"], "{X}"), (["-p", "{X}", "-o", "{L}"], "{X}")]
EXEMPT = {
    "pasta stats": "reads only; writes to standard output",
    "pasta eval winrate": "reads only; writes to standard output",
    "prepare": "reads a GGUF, writes only into the model cache under a name of its own",
    "data list": "reads only; writes to standard output",
    "data make": "reads no file; writes only --out and the manifest beside it",
    "pasta demo": "reads only a model; writes only --out, a JSON of figures",
    "pdiff demo": "reads only models; writes only --out, a JSON of figures",
    "bench step": "reads only a model; writes only --out (JSON) and --plot (PNG), refused "
                  "when they are one file",
    "repro report": "reads a run's files; writes only REPORT.md and summary.json at the top of "
                    "the system's folder, names no step writes",
    "repro table": "reads summaries; rewrites only the marked table inside --readme",
    "tip eval report": "reads a run's samples.jsonl, timing.jsonl and run.json; writes only "
                       "report.md, summary.json and PNGs, names no input can have",
}


def commands(app, path=()):
    for c in app.registered_commands:
        yield " ".join((*path, c.name or c.callback.__name__)), c.callback
    for g in app.registered_groups:
        yield from commands(g.typer_instance, (*path, g.name))


def takes_a_file(fn) -> bool:
    hints = typing.get_type_hints(fn) if not isinstance(fn, type) else {}
    for name, p in inspect.signature(fn).parameters.items():
        if name == "config":
            continue
        ann = hints.get(name, p.annotation)
        nested = [ann, *typing.get_args(ann)]
        nested += [a for n in nested for a in typing.get_args(n)]
        if Path in nested or name in FILE_NAMES:
            return True
    return False


def test_every_file_command_is_swept():
    found = {name for name, fn in commands(solm_main.app) if takes_a_file(fn)}
    missing = found - set(CASES) - set(EXEMPT)
    assert not missing, f"commands that take files but have no same-path case: {missing}"
    every = {name for name, _ in commands(solm_main.app)}
    assert set(CASES) | set(EXEMPT) <= every  # no stale entries


@pytest.mark.parametrize("command,args,kept", [(c, a, k) for c, cases in CASES.items()
                                               for a, k in cases],
                         ids=[f"{c}: {' '.join(a)}" for c, cases in CASES.items()
                              for a, _ in cases])
def test_an_output_that_is_an_input_is_refused(tmp_path, command, args, kept):
    x = tmp_path / "in.jsonl"
    x.write_text(ROW)
    os.symlink(x, tmp_path / "link.jsonl")
    (tmp_path / "m.jsonl").write_text(ROW)
    fill = {"X": str(x), "L": str(tmp_path / "link.jsonl"), "d": str(tmp_path)}
    kept_path = Path(kept.format(**fill))
    kept_path.parent.mkdir(parents=True, exist_ok=True)
    if kept_path != x:
        kept_path.write_text(ROW)
    (tmp_path / "run").mkdir(exist_ok=True)
    before = kept_path.read_bytes()
    argv = [*command.split(), *(a.format(**fill) for a in args)]
    r = runner.invoke(solm_main.app, argv)
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code != 0, r.output
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    assert any(w in lines[0] for w in ("is also an input", "it is the input", "run folder",
                                         "output folder")), lines[0]
    assert kept_path.read_bytes() == before
