"""The paper-scale configs are usable as they stand: every key of a per-command config is an
option of that command (a typo would otherwise only surface on the GPU machine), every
accelerate config parses as accelerate reads it, and `make -n` of each paper target prints
the whole chain with the configs' base models and data sets."""

import shutil
import subprocess
from pathlib import Path

import click
import pytest
import yaml
from typer.main import get_command

from solm.cli import main as solm_main

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "configs" / "paper"
# configs/paper/<system>/<file>.yaml -> the command that reads it
COMMANDS = {
    ("pasta", "annotate"): "pasta annotate", ("pasta", "sft"): "pasta sft",
    ("pasta", "prefs"): "pasta prefs", ("pasta", "bonbon"): "pasta bonbon",
    ("pasta", "eval"): "pasta eval run",
    ("tip", "annotate"): "tip annotate", ("tip", "sft"): "tip sft", ("tip", "grpo"): "tip grpo",
    ("tip", "eval"): "tip eval run",
    ("pdiff", "sft"): "pdiff sft", ("pdiff", "eval"): "pasta eval run",
}


def _command(path: str) -> click.Command:
    cmd = get_command(solm_main.app)
    ctx = click.Context(cmd)
    for part in path.split():
        cmd = cmd.get_command(ctx, part)
        ctx = click.Context(cmd)
    return cmd


def test_every_paper_config_is_mapped():
    found = {(p.parent.name, p.stem) for p in PAPER.glob("*/*.yaml")}
    assert found == set(COMMANDS)


@pytest.mark.parametrize("key", sorted(COMMANDS), ids=lambda k: "/".join(k))
def test_config_keys_are_options_of_their_command(key):
    data = yaml.safe_load((PAPER / key[0] / f"{key[1]}.yaml").read_text())
    options = {p.name for p in _command(COMMANDS[key]).params}
    unknown = {k for k in data if str(k).replace("-", "_") not in options}
    assert not unknown, f"{key}: not options of `{COMMANDS[key]}`: {unknown}"


@pytest.mark.parametrize("name", ["ddp", "fsdp", "sample"])
def test_accelerate_configs_parse(name):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(ROOT / "configs" / "accelerate" / f"{name}.yaml"))
    assert cfg.num_processes >= 1
    if name == "fsdp":
        assert cfg.distributed_type.value == "FSDP" and cfg.fsdp_config


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("system", ["pasta", "tip", "pdiff"])
def test_make_n_prints_the_whole_chain(system, tmp_path):
    run = subprocess.run(["make", "-n", f"repro-{system}-paper", f"PAPER={tmp_path}/paper",
                          f"DATA={tmp_path}/data"], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    text = run.stdout
    top = yaml.safe_load((PAPER / f"{system}.yaml").read_text())
    assert top["base_model"] in text
    assert f"{tmp_path}/data/{top.get('eval_set') or top['eval_sets'].split()[0]}.jsonl" in text
    steps = {"pasta": ["pasta annotate", "pasta sft", "pasta prefs --shard auto", "pasta bonbon",
                       "pasta eval run --shard auto", "solm merge", "pasta eval report"],
             "tip": ["tip annotate", "tip sft", "tip grpo", "tip eval run --shard auto",
                     "solm merge", "tip eval report"],
             "pdiff": ["pdiff sft", "pasta sft", "pasta eval run --shard auto", "solm merge",
                       "pasta eval report"]}[system]
    for step in steps:
        assert step in text, step
    if system == "pasta":  # every lambda x round of the config has its prefs and BoNBoN
        for lam in str(top["lambdas"]).split():
            for r in range(1, int(top["rounds"]) + 1):
                assert f"lambda-{lam}/round-{r}/bonbon" in text
