"""Shell composition: `-` is standard input / output for JSONL; under `-o -` only records
reach stdout (progress, texts and the summary go to stderr) and no file named `-` appears."""

import json
import os
import subprocess
import sys

from typer.testing import CliRunner

from solm.cli import pasta

BIN = os.path.dirname(sys.executable)


def test_decode_from_stdin_to_stdout_into_stats(tmp_path, tiny_folder):
    prompts = "".join(json.dumps({"id": f"p{i}", "prompt": p}) + "\n"
                      for i, p in enumerate(["Name a fruit", "Say hi"]))
    pipeline = (f"{BIN}/pasta decode -p - -o - -m {tiny_folder} --max-new-tokens 5 "
                f"| {BIN}/pasta stats - -q")
    r = subprocess.run(["bash", "-o", "pipefail", "-c", pipeline], input=prompts, text=True,
                       capture_output=True, cwd=tmp_path, timeout=300,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    stats = json.loads(r.stdout)["-"]
    assert stats["rows"] == 2 and stats["mean_content_tokens"] > 0
    assert '"done": 2' in r.stderr  # the decode summary went to stderr
    assert os.listdir(tmp_path) == []  # no file named "-", no manifest


def test_annotate_reads_stdin_and_writes_stdout(tmp_path):
    rows = [{"id": "a", "prompt": "Tips?", "response": "Here are tips:\n\n1. Sleep well - "
             "aim for eight hours every night and keep a regular schedule.\n2. Eat well - "
             "choose vegetables, fruit and whole grains over processed food.\n"}]
    stdin = "".join(json.dumps(r) + "\n" for r in rows)
    r = CliRunner().invoke(pasta.app, ["annotate", "-i", "-", "-o", "-", "-q",
                                       "--min-chunk-tokens", "4"], input=stdin)
    assert r.exit_code == 0, r.output
    records = [json.loads(line) for line in r.stdout.splitlines()]
    assert [rec["id"] for rec in records] == ["a"] and "<promise" in records[0]["annotated"]
