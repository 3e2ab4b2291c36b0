"""The control-token learning-rate scale under wrapping: it looks the embedding up
at each step (wrapping for FSDP replaces the parameters a model held), and under FSDP2 (a
DTensor sharded by rows over processes) it scales exactly the control rows each process
holds."""

import os

import torch
import torch.multiprocessing as mp

from solm.train.callbacks import ControlTokenLrScale


def test_the_scale_follows_a_replaced_embedding(pasta_tokenizer, vocab):
    from solm.core.models import tiny_model

    model, _ = tiny_model(pasta_tokenizer, seed=3)
    cb = ControlTokenLrScale(model, vocab.control_ids, 5.0)
    emb = model.get_input_embeddings()

    def step():  # an optimizer step of 0.01 on every row, with the callback around it
        cb.on_pre_optimizer_step(None, None, None, model=model)
        with torch.no_grad():
            emb.weight -= 0.01
        cb.on_optimizer_step(None, None, None, model=model)

    step()
    emb.weight = torch.nn.Parameter(emb.weight.detach().clone())  # what wrapping does
    start = emb.weight.detach().clone()
    step()
    moved = (start - emb.weight.detach())[:, 0]
    ids = vocab.control_ids
    others = torch.ones_like(moved, dtype=torch.bool)
    others[ids] = False
    assert torch.allclose(moved[ids], torch.full((len(ids),), 0.05), atol=1e-6)
    assert torch.allclose(moved[others], torch.full((int(others.sum()),), 0.01), atol=1e-6)


def _sharded_step(rank: int, world: int, init: str, result: dict) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        full = torch.zeros(11, 3)  # 11 rows over 2 processes: 6 + 5
        weight = torch.nn.Parameter(distribute_tensor(full, mesh, [Shard(0)]))

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(11, 3)
                self.emb.weight = weight

            def get_input_embeddings(self):
                return self.emb

            def get_output_embeddings(self):
                return None

        model = Model()
        cb = ControlTokenLrScale(model, [2, 5, 6, 10], 4.0)
        cb.on_pre_optimizer_step(None, None, None, model=model)
        with torch.no_grad():
            weight.to_local().sub_(1.0)  # every row of this shard steps by -1
        cb.on_optimizer_step(None, None, None, model=model)
        gathered = weight.full_tensor()
        if rank == 0:
            result["moved"] = (-gathered[:, 0]).tolist()
    finally:
        dist.destroy_process_group()


def test_fsdp2_shards_scale_their_own_control_rows(tmp_path):
    world = 2
    init = f"file://{tmp_path / 'store'}"
    with mp.Manager() as manager:
        result = manager.dict()
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        mp.spawn(_sharded_step, args=(world, init, result), nprocs=world, join=True)
        moved = result["moved"]
    expected = [4.0 if row in (2, 5, 6, 10) else 1.0 for row in range(11)]
    assert moved == expected
