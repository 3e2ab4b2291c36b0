"""Every command's numeric options refuse NaN and infinities, and every option that can be
checked without a model is checked before one loads, in one line naming the option. The commands and their options are walked from the app itself, so a new
command is covered the day it lands."""

import re

import pytest
from typer.testing import CliRunner

from solm.cli.errors import _is_float_option
from cli_walk import commands as _commands
from solm.cli.main import app

runner = CliRunner()




def _takes_floats(param) -> bool:
    """Listed from the type the parser converts to (the runtime parameter's annotation,
    under the finite check's wrapper), not with `_is_float_option`, the function under
    test: a bug there must not hide options here."""
    import typing

    runtime = getattr(param, "get_runtime_param", lambda: None)()
    runtime = getattr(runtime, "inner", runtime)
    kind = getattr(runtime, "annotation", None)
    return kind is float or set(typing.get_args(kind)) == {float, type(None)}


FLOAT_OPTIONS = [(path, p.opts[0]) for path, cmd in _commands() for p in cmd.params
                 if _takes_floats(p) and p.opts and p.opts[0].startswith("--")]


def test_the_finite_check_wraps_exactly_the_float_options():
    """The other listing agrees with the guard's own choice of options."""
    listed = {(tuple(path), p.name) for path, cmd in _commands() for p in cmd.params
              if _takes_floats(p)}
    guarded = {(tuple(path), p.name) for path, cmd in _commands() for p in cmd.params
               if _is_float_option(p)}
    assert listed == guarded


def test_the_walk_finds_the_float_options_people_set():
    found = {(" ".join(path), flag) for path, flag in FLOAT_OPTIONS}
    for expected in [("pasta prefs", "--min-length-ratio"), ("pasta bonbon", "--lr"),
                     ("pasta bonbon", "--alpha"), ("tip grpo", "--kv-penalty"),
                     ("pasta decode", "--top-p"), ("pdiff decode", "--length-scale"),
                     ("pasta decode", "--temperature")]:
        assert expected in found
    assert len(found) > 40


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_option_refuses_non_finite_values(value):
    """Each float option of each command, alone on the command line: exit 2 and one line
    naming the option (a NaN was reported as a range error; inf was accepted where no bound
    was set, and `tip grpo --kv-penalty inf` trained to the end)."""
    failures = []
    for path, flag in FLOAT_OPTIONS:
        r = runner.invoke(app, [*path, f"{flag}={value}"])
        line = r.output.strip().splitlines()[-1] if r.output.strip() else ""
        if r.exit_code != 2 or "must be a finite number" not in line or flag not in line:
            failures.append((" ".join(path), flag, r.exit_code, line[:120]))
    assert not failures, failures


@pytest.mark.parametrize("value", ["NaN", "Infinity", "+inf", " nan"])
def test_other_spellings_are_refused_too(value):
    r = runner.invoke(app, ["pasta", "prefs", f"--min-length-ratio={value}"])
    assert r.exit_code == 2 and "must be a finite number" in r.output


def test_a_config_file_value_is_checked_the_same_way(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("kv_penalty: .inf\n")
    r = runner.invoke(app, ["tip", "grpo", "--config", str(cfg), "-o", str(tmp_path / "o"),
                            "-d", str(tmp_path / "d.jsonl")])
    assert r.exit_code == 2 and "must be a finite number" in r.output


TAG = re.compile(r"<[a-z_/!][^<>]*>")


def _squash(text: str) -> str:
    return re.sub(r"[\s│╭╮╰╯─]+", "", text)


def test_help_keeps_every_tag_it_mentions():
    """Help is rendered as markdown, where a bare `<sync/>` is an HTML tag and vanishes
    (`pdiff decode --help` read "after the first : a runaway")."""
    lost = []
    for path, cmd in _commands():
        texts = [cmd.help or ""] + [getattr(p, "help", "") or "" for p in cmd.params]
        tags = {t for s in texts for t in TAG.findall(s)}
        if not tags:
            continue
        shown = _squash(runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100"}).output)
        lost += [(" ".join(path), t) for t in tags if _squash(t) not in shown]
    assert not lost, lost


@pytest.mark.parametrize("spec,says", [
    ("pdiff=pdiff-cpu,steps_ratio=nan", "steps_ratio must be a finite number > 0"),
    ("pdiff=pdiff-cpu,steps_ratio=inf", "steps_ratio must be a finite number > 0"),
    ("pdiff=pdiff-cpu,defer_pads=2", "defer_pads is 0 or 1"),
    ("pdiff=pdiff-cpu,length_scale=1e6", "length_scale must be in [0.1, 8]"),
    ("pdiff=pdiff-cpu,confidence_threshold=1.5", "confidence_threshold must be in (0, 1]"),
    ("pdiff=pdiff-cpu,chunk_temperature=-1", "chunk_temperature must be a finite number >= 0"),
    ("pdiff=pdiff-cpu,order=random", "order must be one of"),
    ("pdiff=pdiff-cpu,steps_ratio=off", "steps_ratio cannot be off"),
])
def test_eval_run_checks_pdiff_method_options_before_loading(tmp_path, spec, says):
    r = runner.invoke(app, ["pasta", "eval", "run", "-p", str(tmp_path / "none.jsonl"), "-o",
                            str(tmp_path / "run"), "--method", "sequential=smollm2-135m",
                            "--method", spec])
    assert r.exit_code == 1 and says in r.output, r.output
    assert "loading" not in r.output and not (tmp_path / "run").exists()


def test_a_judge_spec_is_refused_before_anything_is_read(tmp_path):
    """`pasta prefs --judge foo:bar` was refused after both models loaded and sampling."""
    for cmd in (["pasta", "prefs", "-p", str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "o")],
                ["pasta", "eval", "agreement", "-a", str(tmp_path / "none.json"), "-o",
                 str(tmp_path / "a.json")],
                ["pasta", "eval", "run", "-p", str(tmp_path / "none.jsonl"), "-o",
                 str(tmp_path / "run"), "--method", "sequential=m"]):
        r = runner.invoke(app, [*cmd, "--judge", "foo:bar"])
        assert r.exit_code == 2 and "'--judge'" in r.output and "bad backend spec" in r.output


@pytest.mark.parametrize("args,flag", [
    (["--system", "tip", "--mode", "parallel"], "--mode"),
    (["--system", "tip", "--repetition-penalty", "1.2"], "--repetition-penalty"),
    (["--policy", "h2o"], "--policy"),
    (["--budget", "256"], "--budget"),
])
def test_serve_refuses_the_other_systems_options(args, flag):
    r = runner.invoke(app, ["serve", *args])
    assert r.exit_code == 2 and f"{flag} applies to --system" in r.output


def test_shard_auto_without_a_launcher_is_refused(tmp_path, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "Hi"}\n')
    r = runner.invoke(app, ["pasta", "decode", "-p", str(prompts), "-o",
                            str(tmp_path / "o.jsonl"), "--shard", "auto"])
    assert r.exit_code == 1 and "RANK and WORLD_SIZE not set" in r.output
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("cmd", [
    ["pasta", "decode", "-p", "PROMPTS", "-o", "/proc/solm-x/out.jsonl"],
    ["pasta", "prefs", "-p", "PROMPTS", "-o", "/proc/solm-x/prefs"],
    ["pasta", "sft", "-d", "PROMPTS", "-o", "/proc/solm-x/sft"],
])
def test_an_output_that_cannot_be_created_is_named_before_any_work(tmp_path, cmd):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "Hi", "response": "Yo"}\n')
    r = runner.invoke(app, [str(prompts) if a == "PROMPTS" else a for a in cmd])
    assert r.exit_code == 1 and "cannot be written, nothing can be created in /proc" in r.output
    assert "loading" not in r.output


@pytest.mark.parametrize("budgets,says", [
    ("16,16", "--budgets lists 16 more than once"),
    ("16", "--budgets 16: streamingllm needs a budget of at least two pages "
           "(2 x --page-size 64 = 128 tokens)"),
])
def test_tip_eval_budget_errors_name_its_own_options(tmp_path, budgets, says):
    r = runner.invoke(app, ["tip", "eval", "run", "-o", str(tmp_path / "run"),
                            "--budgets", budgets])
    assert r.exit_code == 1 and says in r.output and "--policy " not in r.output


def test_pdiff_length_scale_is_bounded():
    """`--length-scale 1e6` once gave answers like "1." (no promise fits any answer)."""
    for value in ("1e6", "0.01"):
        r = runner.invoke(app, ["pdiff", "decode", "--length-scale", value, "x"])
        assert r.exit_code == 2 and "'--length-scale'" in r.output
    from solm.decode.pdiff.runtime import PdiffDecodeConfig

    with pytest.raises(ValueError, match="length_scale must be in"):
        PdiffDecodeConfig(length_scale=1e6).check()
