"""GRPO rollouts through an FSDP2-sharded model: the runtime calls the decoder stack
and the head directly, so the root's own parameters must be gathered for the rollout (without
it: "aten.embedding.default got mixed torch.Tensor and DTensor"). Two CPU processes over gloo;
each samples its completions from the sharded model and gets what an unsharded copy of the
same weights samples."""

import contextlib
import os
from types import SimpleNamespace

import torch
import torch.multiprocessing as mp

from conftest import TIP_REGISTERS

PROMPTS = [["What is 2 + 3?", "Hi"], ["Name a prime.", "Count to three."]]


def _rollouts(tok, model, prompts):
    from solm.train.grpo import TipRollouts

    rollouts = TipRollouts(tok, TIP_REGISTERS, "tip", page_size=4, batch_size=2,
                           max_completion_length=12, temperature=1.0, top_p=1.0)
    trainer = SimpleNamespace(model=model, accelerator=SimpleNamespace(
        unwrap_model=lambda m: m, autocast=contextlib.nullcontext))
    return rollouts(prompts, trainer)["completion_ids"]


def _tip_tok():
    from solm.core.models import load_tokenizer
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "tip", num_registers=TIP_REGISTERS)
    return tok


def _sharded_rollouts(rank: int, world: int, init: str, result: dict) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from solm.core.models import tiny_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        tok = _tip_tok()
        model, _ = tiny_model(tok, seed=5)
        mesh = init_device_mesh("cpu", (world,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        result[rank] = _rollouts(tok, model, PROMPTS[rank])
    finally:
        dist.destroy_process_group()


def test_rollouts_through_an_fsdp2_model_sample_what_the_plain_model_does(tmp_path):
    from solm.core.models import tiny_model

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with mp.Manager() as manager:
        result = manager.dict()
        mp.spawn(_sharded_rollouts, args=(2, f"file://{tmp_path / 'store'}", result), nprocs=2,
                 join=True)
        sharded = dict(result)
    tok = _tip_tok()
    model, _ = tiny_model(tok, seed=5)
    for rank in (0, 1):
        assert sharded[rank] == _rollouts(tok, model, PROMPTS[rank])
        assert all(len(c) > 0 for c in sharded[rank])
