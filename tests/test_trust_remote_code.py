"""Models that ship their own modeling code (an `auto_map` in config.json, as Dream-7B does)
load only with `--trust-remote-code`, on every command that loads a model; without it they are
refused with a message naming the flag (never an interactive prompt)."""

import json

from typer.testing import CliRunner

from cli_walk import commands
from solm.cli.main import app

# parameters through which a command loads a model (a model, an eval method's model, an HF
# judge or annotator, a Dense baseline)
LOADS_A_MODEL = {"model", "method", "baseline_model", "dense_model", "judge", "annotator"}


# `pasta eval winrate --judge` names the judge in its report; it loads nothing
NAMES_ONLY = {("pasta", "eval", "winrate")}


def test_every_command_that_loads_a_model_takes_the_flag():
    missing = [" ".join(path) for path, cmd in commands()
               if LOADS_A_MODEL & {p.name for p in cmd.params} and path not in NAMES_ONLY
               and "--trust-remote-code" not in {o for p in cmd.params for o in p.opts}]
    assert not missing, missing


def custom_code_folder(tmp_path, tiny_folder):
    """A copy of the tiny model whose config names its own classes (a Llama subclass)."""
    import shutil

    folder = tmp_path / "custom"
    shutil.copytree(tiny_folder, folder)
    (folder / "configuration_custom.py").write_text(
        "from transformers import LlamaConfig\n\n\nclass CustomConfig(LlamaConfig):\n"
        "    model_type = 'custom_llama'\n")
    (folder / "modeling_custom.py").write_text(
        "from transformers import LlamaForCausalLM\n\nfrom .configuration_custom import "
        "CustomConfig\n\n\nclass CustomForCausalLM(LlamaForCausalLM):\n"
        "    config_class = CustomConfig\n")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="custom_llama", architectures=["CustomForCausalLM"],
                  auto_map={"AutoConfig": "configuration_custom.CustomConfig",
                            "AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_custom_code_loads_only_when_trusted(tmp_path, tiny_folder):
    folder = custom_code_folder(tmp_path, tiny_folder)
    runner = CliRunner()

    def decode(*extra):
        return runner.invoke(app, ["pdiff", "decode", "Say hi.", "-m", str(folder),
                                   "--max-new-tokens", "4", "--dtype", "fp32", "-q", *extra])

    refused = decode()
    assert refused.exit_code != 0
    assert "--trust-remote-code" in refused.output and "auto_map" in refused.output
    trusted = decode("--trust-remote-code")
    assert trusted.exit_code == 0, trusted.output
    again = decode()  # the flag holds for its own command only
    assert again.exit_code != 0 and "--trust-remote-code" in again.output
