"""Bad input at the command line: one line naming the option or file, a non-zero exit, no
traceback, and nothing already written is touched (issue 13's table)."""

import json
import os

import pytest
from typer.testing import CliRunner

from solm.cli import main as solm_main
from solm.cli import pasta, tip

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    prompts = d / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "a", "prompt": "hi", "response": "Hello there."}) + "\n")
    other = d / "other.jsonl"
    other.write_text(json.dumps({"a": 1}) + "\n")
    (d / "folder.jsonl").mkdir()
    (d / "emptymodel").mkdir()
    return d


CASES = [
    # (app, args, what the one line must name)
    (pasta, ["decode", "--limit", "0"], "--limit"),
    (pasta, ["decode", "--limit", "-1"], "--limit"),
    (pasta, ["decode", "--max-new-tokens", "0"], "--max-new-tokens"),
    (pasta, ["decode", "--temperature", "-1"], "--temperature"),
    (pasta, ["decode", "--top-p", "0"], "--top-p"),
    (pasta, ["decode", "--no-repeat-ngram", "-3"], "--no-repeat-ngram"),
    (pasta, ["decode", "--repetition-penalty", "0"], "--repetition-penalty"),
    (pasta, ["decode", "--penalize", "main"], "--penalize"),
    (pasta, ["decode", "--mode", "fast"], "--mode"),
    (pasta, ["decode", "--device", "tpu"], "--device"),
    (pasta, ["decode", "--dtype", "int3"], "--dtype"),
    (pasta, ["decode", "-p", "{d}/folder.jsonl", "-o", "{d}/o.jsonl"], "folder.jsonl"),
    (pasta, ["decode", "-p", "{d}/prompts.jsonl", "-o", "{d}/prompts.jsonl"], "prompts.jsonl"),
    (pasta, ["decode", "-p", "{d}/prompts.jsonl", "-o", "{d}/o.jsonl", "-m", "{d}/emptymodel"],
     "emptymodel"),
    (pasta, ["stats", "{d}/other.jsonl"], "other.jsonl:1"),
    (pasta, ["annotate", "-i", "{d}/prompts.jsonl", "-o", "{d}/prompts.jsonl"], "prompts.jsonl"),
    (pasta, ["annotate", "-i", "{d}/prompts.jsonl", "-o", "{d}/a.jsonl", "--rejects",
             "{d}/prompts.jsonl"], "prompts.jsonl"),
    (pasta, ["annotate", "-i", "{d}/folder.jsonl", "-o", "{d}/a.jsonl"], "folder.jsonl"),
    (pasta, ["annotate", "-i", "{d}/prompts.jsonl", "-o", "/proc/no/such/a.jsonl"], "/proc/no"),
    (pasta, ["sft", "-d", "{d}/prompts.jsonl", "-o", "{d}/s", "--lr", "0"], "--lr"),
    (pasta, ["sft", "-d", "{d}/prompts.jsonl", "-o", "{d}/s", "--precision", "fp8"],
     "--precision"),
    (pasta, ["nope"], "nope"),
    (tip, ["traces", "-o", "{d}/t.jsonl", "--registers", "0"], "--registers"),
    (tip, ["traces", "-o", "{d}/t.jsonl", "--registers", "-2"], "--registers"),
    (tip, ["decode", "-p", "{d}/prompts.jsonl", "--page-size", "0"], "--page-size"),
    (tip, ["decode", "-p", "{d}/prompts.jsonl", "--policy", "nope"], "--policy"),
    (tip, ["bench", "-t", "{d}/prompts.jsonl", "--policies", "dense,nope"], "nope"),
    (solm_main, ["prepare", "--model", "{d}/prompts.jsonl"], "prompts.jsonl"),
    (pasta, ["serve", "--port", "0"], "--port"),
    (pasta, ["serve", "--mode", "fast"], "--mode"),
    (solm_main, ["serve", "--max-queue", "0"], "--max-queue"),
    (solm_main, ["serve", "--temperature", "3"], "--temperature"),
    (pasta, ["eval", "run", "-o", "{d}/run", "--method", "beam=x"], "beam=x"),
    (pasta, ["eval", "run", "-o", "{d}/run", "--method", "sot=x", "--baseline", "nope"],
     "--baseline nope"),
    (pasta, ["eval", "run", "-o", "{d}/run", "--method", "sot=x", "--method", "sot=y"],
     "label"),
    (pasta, ["eval", "run", "-o", "{d}/run", "--method", "sot=x", "--reference",
             "{d}/missing.json"], "missing.json"),
    (pasta, ["eval", "run", "-o", "{d}/run", "--method", "sot=x", "--judge-mode", "vibes"],
     "--judge-mode"),
    (pasta, ["eval", "winrate", "--annotations", "{d}/other.jsonl"], "other.jsonl:1"),
    (pasta, ["eval", "winrate", "--annotations", "{d}/missing.json"], "missing.json"),
    (pasta, ["eval", "report", "{d}"], "run.json"),
    (pasta, ["judge", "-b", "{d}/prompts.jsonl", "-m", "{d}/other.jsonl", "-o", "{d}/j.jsonl"],
     "other.jsonl:1"),
    (pasta, ["judge", "-b", "{d}/prompts.jsonl", "-m", "{d}/prompts.jsonl", "-o",
             "{d}/j.jsonl", "--judge", "claude:x"], "claude:x"),
    (pasta, ["sft", "--data", "{d}/prompts.jsonl", "--out", "{d}/o", "--attention", "xla"],
     "--attention"),
]
if not os.environ.get("CUDA_VISIBLE_DEVICES") and not __import__("torch").cuda.is_available():
    CASES.append((pasta, ["decode", "--device", "cuda"], "--device"))


@pytest.mark.parametrize("app,args,names", CASES,
                         ids=[" ".join(a[:3]) for _, a, _ in CASES])
def test_bad_input_is_one_line_and_a_nonzero_exit(files, app, args, names):
    args = [a.format(d=files) for a in args]
    r = runner.invoke(app.app, args + (["-q"] if args[0] in ("decode", "annotate") else []))
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code != 0, r.output
    assert "Traceback" not in r.output and not isinstance(r.exception, (KeyError,
                                                                          ZeroDivisionError))
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    assert names.format(d=files) in lines[0]


def test_a_refused_rerun_leaves_the_output_as_it_was(files):
    out = files / "kept.jsonl"
    out.write_text('{"id": "a", "response": "done before"}\n')
    before = out.read_bytes()
    for bad in (["--limit", "0"], ["--temperature", "-1"], ["--penalize", "x"]):
        r = runner.invoke(pasta.app, ["decode", "-p", str(files / "prompts.jsonl"), "-o",
                                      str(out), *bad])
        assert r.exit_code != 0
    assert out.read_bytes() == before


def test_version():
    for app in (pasta, tip, solm_main):
        r = runner.invoke(app.app, ["--version"])
        assert r.exit_code == 0 and r.output.startswith("solm ")
