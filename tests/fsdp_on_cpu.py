"""Run `solm` under accelerate's FSDP2 on CPU processes (gloo), for tests:

    accelerate launch --config_file tests/cpu_fsdp.yaml tests/fsdp_on_cpu.py pasta sft ...

accelerate shards only on an accelerator: with no GPU it reads an FSDP config as plain
multi-CPU data parallelism (its state keeps the FSDP plugin but says MULTI_CPU). This keeps the
state FSDP wherever the plugin is set, so the Trainer, accelerate's `fully_shard` wrapping,
its sharded checkpoints and solm's gathered save run as they do on GPUs. With
SOLM_FSDP_REPORT=PATH each process appends what preparing left in its model's parameters
(DTensors, local and global element counts) to PATH.jsonl."""

import json
import os
import runpy
import sys

import accelerate
import torch
import accelerate.state as state
from accelerate.utils import DistributedType

_init = state.AcceleratorState.__init__


def init(self, *args, **kwargs) -> None:
    _init(self, *args, **kwargs)
    plugin = kwargs.get("fsdp_plugin") or getattr(self, "fsdp_plugin", None)
    if self.distributed_type == DistributedType.MULTI_CPU and plugin is not None:
        self.distributed_type = DistributedType.FSDP
        self.fsdp_plugin = plugin


state.AcceleratorState.__init__ = init

_prepare = accelerate.Accelerator.prepare


def prepare(self, *args, **kwargs):
    prepared = _prepare(self, *args, **kwargs)
    report = os.environ.get("SOLM_FSDP_REPORT")
    models = [m for m in (prepared if isinstance(prepared, (tuple, list)) else (prepared,))
              if isinstance(m, torch.nn.Module)]
    if report and models:
        from torch.distributed.tensor import DTensor

        params = list(models[0].parameters())
        with open(report, "a") as f:
            f.write(json.dumps({
                "rank": self.process_index, "params": len(params),
                "dtensors": sum(isinstance(p, DTensor) for p in params),
                "local": sum((p.to_local() if isinstance(p, DTensor) else p).numel()
                             for p in params),
                "global": sum(p.numel() for p in params)}) + "\n")
    return prepared


accelerate.Accelerator.prepare = prepare

if __name__ == "__main__":
    sys.argv = ["solm", *sys.argv[1:]]
    runpy.run_module("solm.cli.main", run_name="__main__")
