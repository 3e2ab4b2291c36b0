"""The output head (hidden states -> logits), computed with oneDNN on CPU where it pays.

The vocabulary projection is the largest single matrix of a small model (49k x 576 for the
embedded one). On this project's CPUs MKL's fp32 GEMM for a few rows of it was measured ~1.5-2x
slower than oneDNN with a pre-packed weight (19 ms vs 11 ms per decode step), so the runtimes
pack it once and repack only if the weight changes.
"""

from __future__ import annotations

from typing import Callable

import torch

from solm.core.models import text_config


def can_pack(weight: torch.Tensor) -> bool:
    """oneDNN's pre-packed projection takes a plain fp32 CPU tensor: not a quantized weight
    (torchao's Int8Tensor raises NotImplementedError there), not bf16, not a GPU tensor."""
    data = weight.data if isinstance(weight, torch.nn.Parameter) else weight
    return (type(data) is torch.Tensor and data.device.type == "cpu"
            and data.dtype == torch.float32 and torch.backends.mkldnn.is_available())


class OutputHead:
    def __init__(self, model):
        self.model = model
        self.linear = model.get_output_embeddings()
        self._packed = None
        self._key = None
        cfg = text_config(model)
        self.usable = (
            isinstance(self.linear, torch.nn.Linear)
            and getattr(model, "base_model", model) is not model
            and getattr(cfg, "final_logit_softcapping", None) is None
            and getattr(cfg, "logit_scale", None) is None
        )
        self.packs = self.usable and can_pack(self.linear.weight)

    def _weight(self):
        w = self.linear.weight
        key = (w.data_ptr(), tuple(w.shape), w._version)
        if key != self._key:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), 1)
            self._key = key
        return self._packed

    def model_logits(self, inputs: dict, rows: Callable[[torch.Tensor], torch.Tensor],
                     plain: bool = False) -> torch.Tensor:
        """Run the model on `inputs` and return logits of the hidden rows `rows` selects
        (from [B, q, hidden]); through this head where it is usable, else the model's own.
        `plain`: the unpacked projection (inside a compiled graph, inductor picks the GEMM)."""
        if self.usable:
            hidden = rows(self.model.base_model(**inputs).last_hidden_state)
            return self.linear(hidden) if plain else self(hidden)
        return rows(self.model(**inputs).logits)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        # under autocast (a bf16 GRPO rollout) the plain projection, which autocast casts as
        # the trainer's forward does; the packed fp32 GEMM would bypass it
        if (self.packs and can_pack(self.linear.weight)  # weights quantized since: plain path
                and not torch.is_autocast_enabled(hidden.device.type)):
            return torch.ops.mkldnn._linear_pointwise(hidden, self._weight(), self.linear.bias,
                                                      "none", [], "")
        return self.linear(hidden)
