"""Trainer callbacks of solm's trainers."""

from __future__ import annotations

import torch
from transformers import TrainerCallback


class ControlTokenLrScale(TrainerCallback):
    """Multiply the optimizer's step on the control tokens' embedding (and untied output)
    rows by `scale`.

    New tokens start as the mean embedding, many nats below any real token; at a finetuning
    learning rate Adam moves each coordinate by about lr per step, so with a short schedule
    the model never learns to emit them. Amplifying the step actually taken (after the
    optimizer) gives those rows a `scale`-times larger learning rate while every other weight
    keeps the schedule; the rows are one tensor with the rest of the vocabulary, so an
    optimizer parameter group cannot do this.
    """

    def __init__(self, model, token_ids: list[int], scale: float):
        self.scale = scale
        self.ids = torch.tensor(sorted(set(token_ids)), dtype=torch.long)
        self.model = model
        self._before: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def weights(self, model) -> list[torch.Tensor]:
        """The embedding (and untied output) weights as they are now: looked up at each step,
        because wrapping for FSDP replaces the parameters the model held when this was made."""
        weights = [model.get_input_embeddings().weight]
        out = model.get_output_embeddings()
        if out is not None and out.weight is not weights[0]:
            weights.append(out.weight)
        return weights

    def local_rows(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(this process's part of the weight, the control rows in it): all of it, or under
        FSDP2 (a DTensor sharded by rows) the local shard and the rows it holds."""
        from torch.distributed.tensor import DTensor

        ids = self.ids.to(weight.device)
        if not isinstance(weight, DTensor):
            return weight, ids
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        local = weight.to_local()
        shape, offset = compute_local_shape_and_global_offset(
            weight.shape, weight.device_mesh, weight.placements)
        start = offset[0]
        mine = ids[(ids >= start) & (ids < start + shape[0])] - start
        return local, mine.to(local.device)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if self.scale == 1.0:
            return
        self._before = []
        for w in self.weights(model if model is not None else self.model):
            local, rows = self.local_rows(w)
            self._before.append((local, rows, local.detach()[rows].clone()))

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.scale == 1.0 or not self._before:
            return
        with torch.no_grad():
            for local, rows, before in self._before:
                step = local[rows] - before
                local[rows] = before + self.scale * step
        self._before = []


class EpochToCollator(TrainerCallback):
    """Tell a collator that draws per row and epoch (Planned Diffusion's masking) which epoch
    begins: every process of a data-parallel run, and a resumed run, see the same one."""

    def __init__(self, collator):
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.epoch = int(state.epoch or 0)
