"""Training attention as FlexAttention block masks built from a system's mask terms.

SDPA takes the dense [T, T] mask and multiplies masked-out scores away; FlexAttention skips
every 128 x 128 block the mask leaves empty, which is most of a long PASTA row (blocks do not
see each other, main does not see open blocks). The block mask is built from the same terms
`structure()` uses (`solm.core.structure`), over the batch's attributes, with the collator's
padding rule: a padded position sees only itself. `--attention auto` picks flex on CUDA and
SDPA on a CPU, where FlexAttention has no backward pass at all (and its forward measured
slower than SDPA's: `bench/flex_attention.py`).
"""

from __future__ import annotations

from typing import Callable

import torch

from solm.core.structure import MaskTerm

ATTENTION_CHOICES = ("auto", "sdpa", "flex")


def resolve_attention(choice: str, device_type: str) -> str:
    if choice not in ATTENTION_CHOICES:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION_CHOICES)}")
    if choice == "flex" and device_type == "cpu":
        from solm.core.errors import SolmError
        raise SolmError("--attention flex: FlexAttention has no backward pass on a CPU in "
                        f"torch {torch.__version__}; train with --attention sdpa (the default "
                        "there)")
    if choice != "auto":
        return choice
    return "flex" if device_type == "cuda" else "sdpa"


def batch_mask_mod(term: MaskTerm, attrs: dict[str, torch.Tensor],
                   lengths: torch.Tensor) -> Callable:
    """`mask_mod(b, h, q_idx, kv_idx)` of a padded batch: the term inside each row's length,
    and a padded query seeing only itself (so no softmax row is empty)."""

    def mask_mod(b, h, q_idx, kv_idx):
        n = lengths[b]
        real = (q_idx < n) & (kv_idx < n)
        q = {name: t[b, q_idx] for name, t in attrs.items()}
        k = {name: t[b, kv_idx] for name, t in attrs.items()}
        return (real & term(q, k)) | ((q_idx >= n) & (q_idx == kv_idx))

    return mask_mod


def block_mask_for(term: MaskTerm, attrs: dict[str, torch.Tensor], lengths: torch.Tensor,
                   device: torch.device | str):
    from torch.nn.attention.flex_attention import create_block_mask

    b, t = next(iter(attrs.values())).shape
    attrs = {name: v.to(device) for name, v in attrs.items()}
    return create_block_mask(batch_mask_mod(term, attrs, lengths.to(device)), b, None, t, t,
                             device=device)


def flex_trainer(base: type, term: MaskTerm) -> type:
    """`base` (a transformers Trainer class) that turns the collator's `structure_attrs` and
    `lengths` into a BlockMask on the batch's device before the model runs."""

    def with_block_mask(inputs: dict) -> dict:
        if "structure_attrs" in inputs:
            attrs, lengths = inputs.pop("structure_attrs"), inputs.pop("lengths")
            inputs["attention_mask"] = block_mask_for(term, attrs, lengths,
                                                      inputs["input_ids"].device)
        return inputs

    class FlexMaskTrainer(base):
        def compute_loss(self, model, inputs, *args, **kwargs):
            return super().compute_loss(model, with_block_mask(inputs), *args, **kwargs)

        def prediction_step(self, model, inputs, *args, **kwargs):
            return super().prediction_step(model, with_block_mask(inputs), *args, **kwargs)

    FlexMaskTrainer.__name__ = f"Flex{base.__name__}"
    return FlexMaskTrainer
