"""Weight-only quantization for decoding (torchao), as gpt-fast does it.

A decode step reads every weight once per step, so at batch 1 its time is mostly bytes
moved: int8 weights halve bf16's bytes. Activations stay in the model's dtype. This is for
decoding only: outputs agree with the unquantized model rather than equal it (the tests check
agreement; the benchmarks report the logit drift).
"""

from __future__ import annotations

import logging

import torch

from solm.core.errors import SolmError

SCHEMES = ("int8", "int4")


def quantize_weights(model, scheme: str) -> None:
    """Replace the model's Linear weights in place with `scheme` weight-only tensors."""
    if scheme not in SCHEMES:
        raise SolmError(f"--quantize must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    # torchao warns at import about CUDA kernels a CPU build lacks; torch about a pytree enum
    logging.getLogger("torchao").setLevel(logging.ERROR)
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    try:
        from torchao.quantization import (Int4WeightOnlyConfig, Int8WeightOnlyConfig,
                                          quantize_)
    except ImportError:
        raise SolmError("--quantize needs torchao: pip install torchao") from None
    device = next(model.parameters()).device
    if scheme == "int4" and device.type != "cuda":
        raise SolmError("--quantize int4: torchao's int4 weight-only kernels need a CUDA "
                        "device; on a CPU use --quantize int8")
    config = Int8WeightOnlyConfig() if scheme == "int8" else Int4WeightOnlyConfig(group_size=128)
    quantize_(model, config)
    if not any(type(m.weight) is not torch.nn.Parameter or
               type(m.weight.data) is not torch.Tensor
               for m in model.modules() if isinstance(m, torch.nn.Linear)):
        raise SolmError(f"--quantize {scheme}: torchao left every weight as it was on "
                        f"{device.type}")


def weight_bytes(model) -> int:
    """Bytes a forward pass reads for weights: every parameter once (tied ones once), the
    input embedding table excluded unless it is the tied output head (a step reads only the
    rows of the tokens it feeds)."""
    seen: set[int] = set()
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is embed
    total = 0
    for p in model.parameters():
        if id(p) in seen or (p is embed and not tied):
            continue
        seen.add(id(p))
        total += tensor_bytes(p)
    return total


def tensor_bytes(t: torch.Tensor) -> int:
    """Storage bytes of a tensor, looking inside tensor subclasses (quantized weights)."""
    data = t.data if isinstance(t, torch.nn.Parameter) else t
    if type(data) is torch.Tensor:
        return data.numel() * data.element_size()
    if hasattr(data, "__tensor_flatten__"):
        names, _ = data.__tensor_flatten__()
        return sum(tensor_bytes(getattr(data, n)) for n in names)
    return data.numel() * data.element_size()
