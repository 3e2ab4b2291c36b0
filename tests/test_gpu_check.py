"""The GPU check (bench/gpu_check.py) runs in CI in its dry mode: it lists what it will
measure on a GPU and writes that plan, so a GPU machine can run it at once."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_check_lists_its_checks(tmp_path):
    out = tmp_path / "plan.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--dry", "--out",
                        str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    plan = json.loads(out.read_text())
    assert plan["dry"] is True
    assert set(plan["checks"]) == {"flex_losses_equal_sdpa", "flex_graphs_bounded",
                                   "sdpa_gqa_kernel", "check_model_archs",
                                   "bf16_rollout_logprobs", "flex_training_steps"}
