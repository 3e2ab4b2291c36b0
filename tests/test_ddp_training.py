"""Multi-process training: Pasta-SFT as two CPU processes (`accelerate launch`
with configs/accelerate/cpu_ddp.yaml: torchrun underneath, gloo) ends with the parameters one
process reaches with the same global batch, saves a model that loads and decodes alike, and a
two-process run resumed from a mid-run checkpoint ends where an unbroken one does. Planned
Diffusion's SFT (its masking drawn per row and epoch, whichever process collates the row) and
BoNBoN (its reference log-probs computed in each process) and TIP-GRPO (rollouts seeded by
their place in the global batch) end alike as well, and Pasta-SFT under FSDP2 (parameters
sharded as DTensors) trains, saves and resumes as one process. Slow: fifteen launches (3 min 10 s
one after another on a 2-core Xeon, 1 min 50 s with -n 2)."""

import json
import os
import shutil
import socket
import subprocess
import sys

from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

ROWS = [{"prompt": "Give me tips",
         "annotated": 'Tips:\n1. <promise topic="Sleep" tokens="1"/><async>Sleep well.</async>\n'
                 '2. <promise topic="Water" tokens="1"/><async>Drink water.</async>\n<sync/>'
                 'Done.'},
        {"prompt": "Say hi", "response": "Hi there, nice to meet you."},
        {"prompt": "Name a fruit", "response": "An apple."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(args: list[str], out, processes: int, command: tuple[str, ...] = ("pasta", "sft"),
          fsdp: bool = False, env: dict | None = None) -> None:
    """One plain process, or `processes` launched by `accelerate launch`: DDP with the CPU
    config users get, or FSDP2 through tests/fsdp_on_cpu.py."""
    # a port of its own: launches from tests running side by side (xdist) must not meet
    accelerate = [os.path.join(os.path.dirname(sys.executable), "accelerate"), "launch",
                  "--main_process_port", str(free_port()), "--num_processes", str(processes)]
    if fsdp:
        launcher = [*accelerate, "--config_file", str(ROOT / "tests" / "cpu_fsdp.yaml"),
                    str(ROOT / "tests" / "fsdp_on_cpu.py")]
    elif processes > 1:
        launcher = [*accelerate, "--config_file",
                    str(ROOT / "configs" / "accelerate" / "cpu_ddp.yaml"), "-m", "solm.cli.main"]
    else:
        launcher = [sys.executable, "-m", "solm.cli.main"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    r = subprocess.run([*launcher, *command, *args, "--out", str(out)], capture_output=True,
                       text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]


def weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def max_diff(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in b if k in a and a[k].shape == b[k].shape)


def ended_alike(tmp_path, tiny_folder, moved_at_least: float):
    """(one process's weights, two processes'): the run moved the weights, and both ended
    within 1e-4 of each other."""
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert max_diff(one, weights(Path(tiny_folder))) > moved_at_least
    assert max_diff(one, two) < 1e-4
    return one, two


def greedy(folder) -> list[int]:
    from solm.core.chat import prompt_ids
    from solm.core.models import load_model

    model, tok = load_model(str(folder), dtype="fp32", device="cpu")
    ids = torch.tensor([prompt_ids(tok, "Give me tips")])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    return out[0, ids.shape[1]:].tolist()


def killed_after_checkpoint_4(done, broken) -> None:
    """A copy of a finished run as if killed after its step-4 checkpoint: the final model,
    its record and the step-5 checkpoint are gone."""
    shutil.copytree(done, broken)
    for name in ("model.safetensors", "solm.json"):
        (broken / name).unlink()
    shutil.rmtree(broken / "checkpoints" / "checkpoint-5", ignore_errors=True)
    assert (broken / "checkpoints" / "checkpoint-4").is_dir()


def pasta_sft_settings(tmp_path, model: str) -> list[str]:
    """Twelve rows; fp32 and a learning rate that moves the weights (3e-3 over 5 steps):
    global batch 4, micro-batch 1, so one process accumulates 4 and two processes 2 each."""
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({**ROWS[i % 3], "id": f"r{i}"}) + "\n"
                            for i in range(12)))
    return ["--data", str(data), "--model", model, "--max-steps", "5", "--batch-size", "4",
            "--micro-batch-size", "1", "--eval-rows", "0", "--lr", "1e-3", "--precision",
            "fp32", "--save-every", "2", "--quiet"]


@pytest.mark.slow
def test_two_processes_train_save_and_resume_as_one(tmp_path, tiny_folder):
    common = pasta_sft_settings(tmp_path, tiny_folder)
    train(common, tmp_path / "one", 1)
    train(common, tmp_path / "two", 2)
    one, two = ended_alike(tmp_path, tiny_folder, moved_at_least=1e-3)
    meta = json.loads((tmp_path / "two" / "solm.json").read_text())
    assert meta["effective"]["world_size"] == 2
    assert meta["effective"]["gradient_accumulation_steps"] == 2
    assert greedy(tmp_path / "one") == greedy(tmp_path / "two")
    broken = tmp_path / "broken"
    killed_after_checkpoint_4(tmp_path / "two", broken)
    train(common, broken, 2)
    resumed = json.loads((broken / "solm.json").read_text())
    assert resumed["results"]["resumed_from"].endswith("checkpoint-4")
    again = weights(broken)
    assert max_diff(again, two) < 1e-5


def pairs_file(path) -> str:
    from solm.core.chat import text_ids
    from solm.core.models import load_tokenizer
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pasta")
    answers = [ROWS[0]["annotated"], "Sleep and drink water.", "No tips today."]
    path.write_text("".join(json.dumps({
        "id": f"p{i}", "prompt": f"Give me tip {i}.", "n": 2 + i % 3,
        "chosen": {"ids": text_ids(tok, answers[i % 3]), "forced": [], "ended": True},
        "rejected": {"ids": text_ids(tok, answers[(i + 1) % 3]), "forced": [],
                     "ended": i % 2 == 0}}) + "\n" for i in range(8)))
    return str(path)


def register_happy_folder(folder) -> str:
    """A tiny random TIP model whose rollouts open registers often, so the live KV (and with
    it the reward) varies inside a group (`steered_models`)."""
    from steered_models import save_model, steered_model

    from solm.core.models import load_tokenizer
    from solm.core.systems.tip import TipVocab
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "tip", num_registers=4)
    model = steered_model(tok, TipVocab.from_tokenizer(tok, 4).control_ids, 1.2, seed=5)
    return save_model(model, tok, folder)


def grpo_problems(tmp_path) -> tuple[str, str, list[str]]:
    data = tmp_path / "gsm.jsonl"
    data.write_text("".join(json.dumps({"id": f"gsm8k-{i}", "question": f"What is {i} + 1?",
                                        "answer": f"#### {i + 1}"}) + "\n" for i in range(8)))
    settings = ["--registers", "4", "--batch-size", "8", "--num-generations", "2",
                "--micro-batch-size", "2", "--max-completion-length", "12", "--page-size", "4",
                "--rollout-batch", "4", "--lora-r", "0", "--logging-steps", "1"]
    return str(data), register_happy_folder(tmp_path / "model"), settings


@pytest.mark.slow
@pytest.mark.parametrize("command", [("pdiff", "sft"), ("pasta", "bonbon"), ("tip", "grpo")])
def test_two_processes_end_where_one_does(tmp_path, tiny_folder, command):
    """Planned Diffusion's SFT (masking drawn per row and epoch wherever the row is
    collated), BoNBoN (reference log-probs computed in each process) and TIP-GRPO (rollouts
    seeded by their place in the global batch and by the optimizer step, so a resumed run
    samples what an unbroken one did; rewards that vary inside groups): two processes end
    where one does, their saved model decodes alike, and a resumed run ends where the
    unbroken one did."""
    model, settings, lr = tiny_folder, ["--batch-size", "4", "--micro-batch-size", "1"], "1e-3"
    if command == ("pasta", "bonbon"):
        data, lr = pairs_file(tmp_path / "pairs.jsonl"), "1e-2"
    elif command == ("tip", "grpo"):
        data, model, settings = grpo_problems(tmp_path)
    else:
        data = tmp_path / "rows.jsonl"
        data.write_text("".join(json.dumps({**ROWS[0], "id": f"r{i}"}) + "\n"
                                for i in range(8)))
    common = ["--data", str(data), "--model", model, "--max-steps", "5", *settings,
              "--eval-rows", "0", "--lr", lr, "--precision", "fp32", "--save-every", "2",
              "--quiet"]
    train(common, tmp_path / "one", 1, command)
    train(common, tmp_path / "two", 2, command)
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert max_diff(one, weights(Path(model))) > 1e-4
    assert max_diff(one, two) < 1e-4
    assert greedy(tmp_path / "one") == greedy(tmp_path / "two")
    if command == ("tip", "grpo"):
        log = [json.loads(x) for x in
               (tmp_path / "one" / "train_log.jsonl").read_text().splitlines() if x.strip()]
        assert any(e.get("reward_std", 0) > 0 for e in log), log
    broken = tmp_path / "broken"
    killed_after_checkpoint_4(tmp_path / "two", broken)
    train(common, broken, 2, command)
    resumed = json.loads((broken / "solm.json").read_text())
    assert resumed["results"]["resumed_from"].endswith("checkpoint-4")
    assert max_diff(weights(broken), two) < 1e-5


@pytest.mark.slow
def test_fsdp2_processes_shard_train_save_and_resume_as_one(tmp_path, tiny_folder):
    """FSDP2 (accelerate's fully_shard over gloo): each process holds half of every
    parameter as a DTensor, the run ends where one process does, the gathered save is the
    whole model (every tensor at its full shape) and decodes alike, and a run resumed from its
    sharded step-4 checkpoint ends where the unbroken one did."""
    common = pasta_sft_settings(tmp_path, tiny_folder)
    report = tmp_path / "sharding.jsonl"
    train(common, tmp_path / "one", 1)
    train(common, tmp_path / "two", 2, fsdp=True, env={"SOLM_FSDP_REPORT": str(report)})
    shards = [json.loads(x) for x in report.read_text().splitlines()]
    assert sorted(s["rank"] for s in shards) == [0, 1]
    for s in shards:
        assert s["dtensors"] == s["params"] > 0
        assert s["local"] <= s["global"] // 2 + s["params"]  # half of each, rounded up
    one, two = ended_alike(tmp_path, tiny_folder, moved_at_least=1e-3)
    assert {k: v.shape for k, v in two.items()} == {k: v.shape for k, v in one.items()}
    assert greedy(tmp_path / "one") == greedy(tmp_path / "two")
    assert (tmp_path / "two" / "checkpoints" / "checkpoint-4" / "pytorch_model_fsdp_0").is_dir()
    broken = tmp_path / "broken"
    killed_after_checkpoint_4(tmp_path / "two", broken)
    train(common, broken, 2, fsdp=True)
    resumed = json.loads((broken / "solm.json").read_text())
    assert resumed["results"]["resumed_from"].endswith("checkpoint-4")
    assert max_diff(weights(broken), two) < 1e-5


@pytest.mark.parametrize("teardown_returns", [True, False])
def test_a_teardown_that_never_returns_ends_the_process_with_success(monkeypatch,
                                                                      teardown_returns):
    """After the last barrier, a process-group teardown that hangs (gloo, now and then) ends
    the process with exit status 0 once the grace has passed; one that returns ends nothing."""
    import threading

    import torch.distributed as dist

    import solm.train.base as base

    calls, forever = [], threading.Event()
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(dist, "destroy_process_group",
                        lambda: calls.append("destroy") if teardown_returns else forever.wait())
    exits = []

    def fake_exit(code):
        exits.append(code)

    monkeypatch.setattr(base.os, "_exit", fake_exit)
    monkeypatch.setattr(base, "SHUTDOWN_GRACE_S", 0.5)
    base.end_process_group()
    forever.set()
    assert calls[0] == "barrier"
    assert exits == ([] if teardown_returns else [0])
    assert ("destroy" in calls) == teardown_returns
