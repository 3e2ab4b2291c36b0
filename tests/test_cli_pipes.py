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


def test_annotate_reads_stdin_and_writes_stdout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = [{"id": "a", "prompt": "Tips?", "response": "Here are tips:\n\n1. Sleep well - "
             "aim for eight hours every night and keep a regular schedule.\n2. Eat well - "
             "choose vegetables, fruit and whole grains over processed food.\n"}]
    stdin = "".join(json.dumps(r) + "\n" for r in rows)
    r = CliRunner().invoke(pasta.app, ["annotate", "-i", "-", "-o", "-", "-q",
                                       "--min-chunk-tokens", "4"], input=stdin)
    assert r.exit_code == 0, r.output
    records = [json.loads(line) for line in r.stdout.splitlines()]
    assert [rec["id"] for rec in records] == ["a"] and "<promise" in records[0]["annotated"]
    assert os.listdir(tmp_path) == []  # no rejects file, no manifest


def test_rerun_with_other_row_settings_is_refused_unless_forced(tmp_path, tiny_folder):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"Say {i}"}) + "\n"
                               for i in range(3)))
    out = tmp_path / "out.jsonl"
    base = ["decode", "-p", str(prompts), "-o", str(out), "-m", tiny_folder,
            "--max-new-tokens", "3", "-q"]
    runner = CliRunner()
    assert runner.invoke(pasta.app, base + ["--limit", "1"]).exit_code == 0
    # more rows with the same settings: resumes
    r = runner.invoke(pasta.app, base + ["--limit", "2"])
    assert r.exit_code == 0 and len(out.read_text().splitlines()) == 2
    before = out.read_bytes()
    r = runner.invoke(pasta.app, base + ["--temperature", "0.7"])
    assert r.exit_code == 1 and "temperature=0.0 (now 0.7)" in r.output
    assert out.read_bytes() == before  # nothing appended
    r = runner.invoke(pasta.app, base + ["--temperature", "0.7", "--force"])
    assert r.exit_code == 0 and len(out.read_text().splitlines()) == 3
    manifest = json.loads((tmp_path / "out.jsonl.manifest.json").read_text())
    assert manifest["mixed_settings"] is True and manifest["row_settings"]["temperature"] == 0.7


def test_one_prompt_from_the_command_line(tmp_path, tiny_folder, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(pasta.app, ["decode", "Name a fruit", "-m", tiny_folder,
                                       "--max-new-tokens", "4", "--compare", "-q"])
    assert r.exit_code == 0, r.output
    assert "forward passes" in r.stderr and "latency ratio" in r.stderr
    assert "forward passes" not in r.stdout and r.stdout.endswith("\n")  # the answer alone
    assert os.listdir(tmp_path) == []  # a single prompt writes no files
    r = CliRunner().invoke(pasta.app, ["decode", "hi", "-p", "x.jsonl", "-m", tiny_folder])
    assert r.exit_code == 1 and "not both" in r.output


def test_an_interrupted_decode_leaves_its_settings_for_the_rerun_check(tmp_path, tiny_folder,
                                                                       monkeypatch):
    """A new user's trial: a decode interrupted after one row (max-new-tokens 48) left no
    manifest, so a rerun with 32 was accepted and the manifest then said mixed: false."""
    import solm.decode.jobs as jobs

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"Say {i}"}) + "\n"
                               for i in range(3)))
    out = tmp_path / "out.jsonl"
    base = ["decode", "-p", str(prompts), "-o", str(out), "-m", tiny_folder, "-q"]
    real = jobs.decode_records

    def interrupted(runner, records, out_path, *args, **kwargs):
        real(runner, records[:1], out_path, *args, **kwargs)  # one row written, then ^C
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs, "decode_records", interrupted)
    r = CliRunner().invoke(pasta.app, base + ["--max-new-tokens", "6"])
    assert r.exit_code != 0 and len(out.read_text().splitlines()) == 1
    monkeypatch.setattr(jobs, "decode_records", real)
    r = CliRunner().invoke(pasta.app, base + ["--max-new-tokens", "4"])
    assert r.exit_code == 1 and "max_new_tokens=6 (now 4)" in r.output, r.output
    assert len(out.read_text().splitlines()) == 1  # nothing appended
    r = CliRunner().invoke(pasta.app, base + ["--max-new-tokens", "6"])
    assert r.exit_code == 0 and len(out.read_text().splitlines()) == 3
    manifest = json.loads((tmp_path / "out.jsonl.manifest.json").read_text())
    assert manifest["mixed_settings"] is False and manifest["finished"] is True


def test_a_prompt_that_can_never_fit_is_refused_and_the_others_decode(tmp_path, tiny_folder):
    """A new user's trial: one 100 KB prompt among three aborted the file, 0 rows written.
    Now the others decode, and the run exits 1 naming the refused one (a pipeline stops)."""
    prompts = tmp_path / "p.jsonl"
    rows = [{"id": "a", "prompt": "Say a"}, {"id": "big", "prompt": "word " * 3000},
            {"id": "c", "prompt": "Say c"}]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    for batch in ("1", "2"):
        out.unlink(missing_ok=True)
        r = CliRunner().invoke(pasta.app, ["decode", "-p", str(prompts), "-o", str(out), "-m",
                                           tiny_folder, "--max-new-tokens", "4",
                                           "--pool-size", "256", "--batch-size", batch])
        assert r.exit_code == 1 and "1 of 3 decodes refused ('big'" in r.output, r.output
        assert [json.loads(x)["id"] for x in out.read_text().splitlines()] in (["a", "c"],
                                                                              ["c", "a"])
        assert "'big' refused" in r.output and "--pool-size" in r.output
        manifest = json.loads((tmp_path / "out.jsonl.manifest.json").read_text())
        (refused,) = manifest["summary"]["refused"]
        assert refused["id"] == "big" and "--pool-size" in refused["reason"]


def test_rerunning_a_finished_output_loads_no_model(tmp_path, tiny_folder, monkeypatch):
    """A new user's trial: a rerun of a finished output loaded the model (22 s) to print
    "done": 0."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"Say {i}"}) + "\n"
                               for i in range(2)))
    out = tmp_path / "out.jsonl"
    args = ["decode", "-p", str(prompts), "-o", str(out), "-m", tiny_folder,
            "--max-new-tokens", "3"]
    assert CliRunner().invoke(pasta.app, args + ["-q"]).exit_code == 0
    import solm.decode.pasta.system as system

    def no_load(*a, **k):
        raise AssertionError("the model was loaded for a finished output")

    monkeypatch.setattr(system, "load_on_engine", no_load)
    r = CliRunner().invoke(pasta.app, args)
    assert r.exit_code == 0, r.output
    assert '"done": 0' in r.output and '"skipped": 2' in r.output
    assert len(out.read_text().splitlines()) == 2


def test_a_base_model_is_named_as_one_before_it_decodes(tmp_path, tiny_folder):
    """A new user's trial: `pdiff decode` on the default base model planned 0 chunks
    silently."""
    from solm.core.models import model_system

    r = CliRunner().invoke(pasta.app, ["decode", "Say hi", "-m", tiny_folder,
                                       "--max-new-tokens", "2"])
    assert r.exit_code == 0 and "was not trained for pasta" in r.output
    assert "pasta-bonbon-cpu" in r.output
    assert model_system(tiny_folder) is None
    assert model_system("pdiff-cpu") == "pdiff" and model_system("pasta-sft-cpu") == "pasta"


def python_in_a_fresh_process(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a new interpreter (its own imports and warning filters); it must succeed."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def test_library_deprecation_warnings_do_not_reach_users():
    """A new user's trial: transformers' `is_gradient_checkpointing` FutureWarning, with the
    venv's path, printed on every decode and demo. The CLI's process (not pytest's, which
    resets filters per test) drops the libraries' FutureWarnings and keeps solm's own."""
    code = ("import warnings, solm.cli.console\n"
            "warnings.warn_explicit('library-old', FutureWarning, 'modeling_utils.py', 1, "
            "module='transformers.modeling_utils')\n"
            "warnings.warn_explicit('ours-old', FutureWarning, 'x.py', 1, module='solm.x')\n")
    r = python_in_a_fresh_process(code)
    assert "library-old" not in r.stderr and "ours-old" in r.stderr


def test_the_cli_starts_without_the_modelling_libraries():
    """A new user's trial: every command took 8-11 s before checking anything. Building the
    command line must not import transformers' modelling stack (which pulls in torchao and
    torch's compiler: ~4 s here), peft, trl or datasets; a command imports them when it
    loads a model."""
    code = ("import sys, solm.cli.main\n"
            "heavy = ['transformers.modeling_utils', 'torchao', 'torch._dynamo', 'peft', "
            "'trl', 'datasets']\n"
            "print([m for m in heavy if m in sys.modules])\n")
    assert python_in_a_fresh_process(code).stdout.strip() == "[]"
