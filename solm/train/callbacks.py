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
        weights = [model.get_input_embeddings().weight]
        out = model.get_output_embeddings()
        if out is not None and out.weight is not weights[0]:
            weights.append(out.weight)
        self.weights = weights
        self._before: list[torch.Tensor] = []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.scale != 1.0:
            self._before = [w.detach()[self.ids.to(w.device)].clone() for w in self.weights]

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.scale == 1.0 or not self._before:
            return
        with torch.no_grad():
            for w, before in zip(self.weights, self._before):
                ids = self.ids.to(w.device)
                step = w[ids] - before
                w[ids] = before + self.scale * step
        self._before = []
