"""Token-weighted next-token loss for the Trainer (`compute_loss_func`)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from solm.core.structure import IGNORE


def weighted_token_loss(model: torch.nn.Module, token_ids: list[int],
                        weight: float) -> Callable[..., torch.Tensor]:
    """Cross-entropy where targets in `token_ids` count `weight` times, while training.

    Labels are pre-shifted for Hugging Face's loss (logits[i] predicts labels[i + 1]), and
    the sum is divided by the number of real targets, as the model's own loss does, so
    weight 1 is exactly the default loss and gradient accumulation stays exact. Evaluation
    (`model.training` false) is unweighted, so held-out losses stay comparable across runs.
    """
    ids = torch.tensor(sorted(set(token_ids)), dtype=torch.long)

    def loss(outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        logits = outputs.logits[:, :-1].float()
        target = labels[:, 1:].to(logits.device).reshape(-1)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target,
                             ignore_index=IGNORE, reduction="none")
        if model.training and weight != 1.0:
            w = torch.ones_like(ce)
            w[torch.isin(target, ids.to(target.device))] = weight
            ce = ce * w
        count = num_items_in_batch if num_items_in_batch is not None else (target != IGNORE).sum()
        return ce.sum() / count

    return loss
