import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from solm.cli import main, pasta, pdiff, tip

runner = CliRunner()


@pytest.mark.parametrize("app, commands", [
    (main.app, ["pasta", "tip", "pdiff", "models", "prepare"]),
    (pasta.app, ["annotate", "sft", "decode", "bench", "stats", "tokens"]),
    (tip.app, ["decode", "bench", "traces", "tokens"]),
    (pdiff.app, ["tokens", "sft", "decode"]),
])
def test_help_lists_the_subcommands(app, commands):
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for c in commands:
        assert c in r.output


@pytest.mark.parametrize("app, args", [(tip.app, ["tokens", "--registers", "2"]),
                                       (pdiff.app, ["tokens"])])
def test_single_command_apps_still_take_the_subcommand_name(app, args):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "tokens added" in r.output


def test_console_scripts_and_solm_pasta_alias_agree():
    bindir = os.path.dirname(sys.executable)  # the venv's scripts, activated or not
    a = subprocess.run([os.path.join(bindir, "pasta"), "--help"], capture_output=True, text=True)
    b = subprocess.run([os.path.join(bindir, "solm"), "pasta", "--help"], capture_output=True,
                       text=True)
    assert a.returncode == b.returncode == 0
    assert "annotate" in a.stdout and "annotate" in b.stdout


def test_user_error_is_one_line_and_nonzero(tmp_path):
    r = subprocess.run([sys.executable, "-m", "solm.cli.pasta", "annotate", "-i",
                        str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o.jsonl")],
                       capture_output=True, text=True)
    assert r.returncode == 1
    err = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(err) == 1 and "missing.jsonl" in err[0] and "Traceback" not in r.stderr


def test_bad_line_error_names_file_and_line(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text('{"prompt": "a", "response": "b"}\n{oops\n')
    r = runner.invoke(pasta.app, ["annotate", "-i", str(data), "-o", str(tmp_path / "o.jsonl")])
    assert r.exit_code == 1 and "in.jsonl:2" in r.output


def test_decode_end_to_end_with_a_saved_tiny_model(tmp_path, pasta_tokenizer):
    from solm.core.models import tiny_model
    model, tok = tiny_model(pasta_tokenizer)
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "hi"}\n{"id": "b", "prompt": "hello"}\n')
    out = tmp_path / "out.jsonl"
    args = ["decode", "-m", str(tmp_path / "tiny"), "-p", str(prompts), "-o", str(out),
            "--max-new-tokens", "12", "--temperature", "0.8", "--engine", "torch", "-q"]
    r = runner.invoke(pasta.app, args)
    assert r.exit_code == 0, r.output
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert [x["id"] for x in rows] == ["a", "b"]
    for key in ("response", "annotated", "content_tokens", "critical_path", "forward_passes",
                "threads", "wall_s", "flags"):
        assert key in rows[0]
    manifest = json.loads((tmp_path / "out.jsonl.manifest.json").read_text())
    assert manifest["settings"]["max_new_tokens"] == 12 and manifest["inputs"]
    # 2 prompts x 12 tokens: too short for compiling to pay; bandwidth reported either way
    assert manifest["speed"]["compiled"] is False
    assert 0 < manifest["speed"]["bandwidth_fraction"] and manifest["speed"]["bandwidth_gbs"] > 0
    r = runner.invoke(pasta.app, args)  # resumes: nothing new to do
    assert r.exit_code == 0 and len(out.read_text().splitlines()) == 2
