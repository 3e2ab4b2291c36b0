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

import contextlib
from typing import Callable

import torch

from solm.core.structure import MaskTerm

ATTENTION_CHOICES = ("auto", "sdpa", "flex")
FLEX_IMPLEMENTATION = "flex_attention"
# FlexAttention's block: a flex batch pads its length to whole blocks, and past 8 blocks to
# one of four lengths an octave (at most 25% padding), so the kernels compiled for a run are
# bounded (24 lengths up to 16,384 tokens) however its batches vary
BLOCK = 128
# flex kernels compile for static shapes: dynamo's automatic dynamic shapes (recompiling with
# symbolic sizes once a second shape is seen) generate C++ that does not compile in torch
# 2.13's CPU flex template (`cur_qSplitSize5 was not declared`), and the bucketed lengths
# need more than the default 8 recompiles
COMPILE_SETTINGS = {"automatic_dynamic_shapes": False, "recompile_limit": 64}


def resolve_attention(choice: str, device_type: str, backward: bool = True) -> str:
    """`sdpa` or `flex` for `choice` on `device_type`. FlexAttention runs forward on a CPU
    (log-probs, evaluation) but has no backward there: training with it is refused."""
    if choice not in ATTENTION_CHOICES:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION_CHOICES)}")
    if choice == "flex" and device_type == "cpu" and backward:
        from solm.core.errors import SolmError
        raise SolmError("--attention flex: FlexAttention has no backward pass on a CPU in "
                        f"torch {torch.__version__}; train with --attention sdpa (the default "
                        "there)")
    if choice != "auto":
        return choice
    return "flex" if device_type == "cuda" else "sdpa"


def attention_implementation(model) -> str:
    """The attention implementation of a model, through any wrapper (DDP, FSDP, PEFT)."""
    seen = model
    for _ in range(8):
        config = getattr(seen, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            return config._attn_implementation or "eager"
        seen = getattr(seen, "module", None) or getattr(seen, "base_model", None)
        if seen is None:
            break
    return "eager"


def is_flex(model) -> bool:
    return attention_implementation(model) == FLEX_IMPLEMENTATION


def padded_length(n: int) -> int:
    """A flex batch's length: `n` rounded up to whole blocks; past 8 blocks, to a multiple of
    a quarter of the octave it lies in (9 blocks -> 10, 17 -> 20, 33 -> 40)."""
    blocks = max(1, -(-n // BLOCK))
    step = max(1, 2 ** (blocks.bit_length() - 3))
    return -(-blocks // step) * step * BLOCK


def compile_settings_for(model):
    """A context for a forward of `model`: under FlexAttention, kernels compile for the
    batch's static (bucketed) shape; nothing changes for another model."""
    if is_flex(model):
        return torch._dynamo.config.patch(**COMPILE_SETTINGS)
    return contextlib.nullcontext()


def real_columns(lengths_or_real: torch.Tensor, t: int) -> torch.Tensor:
    """[B, T] bool of the real (non-padding) columns, from per-row lengths (right padding) or
    given as such."""
    if lengths_or_real.dim() == 2:
        return lengths_or_real.bool()
    return torch.arange(t, device=lengths_or_real.device)[None, :] < lengths_or_real[:, None]


def batch_mask_mod(term: MaskTerm, attrs: dict[str, torch.Tensor],
                   lengths: torch.Tensor) -> Callable:
    """`mask_mod(b, h, q_idx, kv_idx)` of a padded batch (`lengths`: per-row lengths, or a
    [B, T] bool of real columns): the term between real columns, and a padding query seeing
    only itself (so no softmax row is empty)."""
    t = next(iter(attrs.values())).shape[1]
    real = real_columns(lengths, t)

    def mask_mod(b, h, q_idx, kv_idx):
        real_q, real_k = real[b, q_idx], real[b, kv_idx]
        q = {name: v[b, q_idx] for name, v in attrs.items()}
        k = {name: v[b, kv_idx] for name, v in attrs.items()}
        return (real_q & real_k & term(q, k)) | (~real_q & (q_idx == kv_idx))

    return mask_mod


def dense_batch_mask(term: MaskTerm, attrs: dict[str, torch.Tensor],
                     lengths: torch.Tensor) -> torch.Tensor:
    """[B, 1, T, T] bool: the same rule as `batch_mask_mod`, every pair at once."""
    t = next(iter(attrs.values())).shape[1]
    real = real_columns(lengths, t)
    visible = term({n: v[:, :, None] for n, v in attrs.items()},
                   {n: v[:, None, :] for n, v in attrs.items()})
    eye = torch.eye(t, dtype=torch.bool, device=real.device)
    return ((real[:, :, None] & real[:, None, :] & visible) | (~real[:, :, None] & eye))[:, None]


_compiled_create_block_mask = None


def block_mask_for(term: MaskTerm, attrs: dict[str, torch.Tensor], lengths: torch.Tensor,
                   device: torch.device | str):
    """The batch's BlockMask, built block by block (compiled: the [B, T, T] mask is never
    materialised)."""
    from torch.nn.attention.flex_attention import create_block_mask

    global _compiled_create_block_mask
    if _compiled_create_block_mask is None:
        _compiled_create_block_mask = torch.compile(create_block_mask, dynamic=False)
    b, t = next(iter(attrs.values())).shape
    attrs = {name: v.to(device) for name, v in attrs.items()}
    return _compiled_create_block_mask(batch_mask_mod(term, attrs, lengths.to(device)), b,
                                       None, t, t, device=device)


def structure_mask(model, term: MaskTerm, attrs: dict[str, torch.Tensor],
                   lengths: torch.Tensor, device: torch.device | str):
    """The structure's mask in the form `model`'s attention honours: a BlockMask for a flex
    model, the dense [B, 1, T, T] bool mask otherwise (one rule, `batch_mask_mod`)."""
    if is_flex(model):
        return block_mask_for(term, attrs, lengths, device)
    return dense_batch_mask(term, {n: v.to(device) for n, v in attrs.items()},
                            lengths.to(device))


def model_attention_mask(model, batch: dict, term: MaskTerm, device: torch.device | str):
    """The mask to give `model` for a collated batch: built from the structure's attributes
    when the batch carries them (flex collation), else the batch's own mask, which a flex
    model must not get in dense form."""
    if "structure_attrs" in batch:
        return structure_mask(model, term, batch["structure_attrs"], batch["lengths"], device)
    mask = batch["attention_mask"]
    if is_flex(model) and isinstance(mask, torch.Tensor) and mask.dim() == 4:
        from solm.core.errors import SolmError
        raise SolmError("a model loaded with FlexAttention got a dense structure mask: "
                        "collate the batch with flex=True (its attributes make a BlockMask)")
    return mask.to(device) if isinstance(mask, torch.Tensor) else mask


def flex_copy(model):
    """The same weights under FlexAttention, refusing dense masks (for forward-only scoring
    and for comparing a model's flex and SDPA paths)."""
    import copy

    twin = copy.deepcopy(model)
    twin.set_attn_implementation(FLEX_IMPLEMENTATION)
    refuse_dense_masks(twin)
    return twin.eval()


def refuse_dense_masks(model) -> None:
    """Make a flex model refuse a dense [B, 1, T, T] mask: FlexAttention would add it to the
    scores (transformers' `score_mask`), erasing causality and the structure silently on
    CUDA (and corrupting memory on a CPU)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    if getattr(decoder, "_solm_refuses_dense_masks", False):
        return

    def check(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.dim() == 4:
            from solm.core.errors import SolmError
            raise SolmError("a dense [B, 1, T, T] attention mask was given to a model loaded "
                            "with FlexAttention, which would add it to the scores instead of "
                            "masking: build the mask with solm.train.flex.structure_mask")

    # on the decoder stack: a PEFT wrapper calls the causal-LM's forward directly, past hooks
    decoder.register_forward_pre_hook(check, with_kwargs=True)
    decoder._solm_refuses_dense_masks = True


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
            with compile_settings_for(model):
                return super().compute_loss(model, with_block_mask(inputs), *args, **kwargs)

        def prediction_step(self, model, inputs, *args, **kwargs):
            with compile_settings_for(model):
                return super().prediction_step(model, with_block_mask(inputs), *args,
                                               **kwargs)

    FlexMaskTrainer.__name__ = f"Flex{base.__name__}"
    return FlexMaskTrainer
