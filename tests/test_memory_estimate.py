"""The written memory estimate: its arithmetic on a hand-worked case, and every
paper stage fitting the GPUs its config names."""

from pathlib import Path

import yaml

from solm.train.memory import GIB, PAPER_STAGES, ModelShape, Stage, estimate, estimate_bytes


def test_the_estimate_is_the_sum_worked_by_hand():
    shape = ModelShape("toy", params=1000, layers=2, hidden=10, kv_heads=1, head_dim=5,
                       vocab=20)
    parts = estimate_bytes(Stage("toy", shape, tokens=3, micro_batch=2, gpus=2,
                                 rollout_batch=4, rollout_tokens=7))
    # layer params: (1000 - 20 x 10) / 2 = 400; tokens: 2 x 3 = 6
    assert parts == {"weights (fp32 shard + bf16 layers)": 4 * 1000 / 2 + 2 * 2 * 400,
                     "gradients (fp32 shard)": 2000,
                     "AdamW moments (fp32 shard)": 4000,
                     "activations (checkpointed)": 2 * 6 * 10 * 2 + 34 * 6 * 10,
                     "logits + log-softmax": 6 * 6 * 20,
                     "rollout KV pool": 2 * 2 * 2 * 1 * 5 * 4 * 7}
    small = estimate(Stage("toy", shape, tokens=3, gpus=2, gpu_gib=1e-6))
    assert small["fits"] is False  # 8.5e-6 GiB of bytes against 0.85e-6


def test_every_paper_stage_fits_the_gpus_its_config_names():
    root = Path(__file__).resolve().parents[1]
    configs = {name: yaml.safe_load((root / "configs" / "paper" / f"{name}.yaml").read_text())
               for name in ("pasta", "tip", "pdiff")}
    for stage in PAPER_STAGES:
        system = stage.name.split()[0]
        config = configs[system]
        assert (stage.gpus, stage.gpu_gib) == (config["gpus"], config["gpu_memory_gib"])
        e = estimate(stage)
        assert e["fits"], (stage.name, e)
        assert e["total"] * GIB <= 0.85 * stage.gpu_gib * GIB
