"""The torch engine: solm's own runtimes on PyTorch (the reference every other engine is
checked against)."""

from __future__ import annotations

import time
from typing import Sequence

from solm.engines.base import Engine


class TorchEngine(Engine):
    name = "torch"
    summary = "solm's own runtime on PyTorch: the reference (training's logits, log-probs)"
    format_option = "dtypes"  # the `solm bench step` option naming its formats
    exact_format = "fp32"  # its logits equal the Hugging Face forward's (fp32)
    reference = True
    torch_step = True
    own_settings = frozenset({"dtype", "quantize", "compile"})

    def load(self, model: str, settings, dtype: str, device: str | None, system: str,
             num_registers: int = 16):
        from solm.core.models import load_decoder
        from solm.core.notices import notice

        loaded = load_decoder(model, dtype=dtype, device=device, system=system,
                              quantize=getattr(settings, "quantize", None),
                              num_registers=num_registers)
        weights = next(loaded[0].parameters())
        quantize = getattr(settings, "quantize", None)
        notice(f"engine torch: {str(weights.dtype).removeprefix('torch.')} weights"
               f"{' quantized ' + quantize if quantize else ''} on {weights.device}")
        return loaded

    def describe(self, settings, dtype: str) -> str:
        return f"torch ({str(dtype).removeprefix('torch.')})"

    def probes(self, model: str, formats: Sequence[str]) -> list:
        from solm.core.models import load_decoder

        return [TorchProbe(load_decoder(model, dtype=f, device="cpu")[0]) for f in formats]


class TorchProbe:
    """solm's torch step (`SlotStep`, the runtimes' eager path): k sequences in one pool,
    each reading its own copy of the context and its new token (what a shared one costs)."""

    engine = "torch"

    def __init__(self, model):
        self.model = model
        self.variant = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        self.step = None

    def _columns(self, seqs: Sequence[int], positions: Sequence[int]) -> dict[str, list[int]]:
        n = len(seqs)
        return {"thread": [0] * n, "order": list(positions), "anchor": list(positions),
                "epoch": [0] * n, "join": [0] * n, "request": [s + 1 for s in seqs],
                "group": [-1] * n, "shared": [0] * n}

    def prepare(self, k_max: int, context: int) -> None:
        from solm.core.structure import BATCH_ATTR_NAMES, and_masks, same_request
        from solm.core.systems.pasta import ATTR_NAMES, pasta_visible
        from solm.engines.torch.slots import SlotStep
        from solm.engines.probe import context_ids

        self.context, self.base = context, k_max * context
        self.step = SlotStep(self.model, self.base + k_max,
                             and_masks(same_request, pasta_visible),
                             (*ATTR_NAMES, *BATCH_ATTR_NAMES))
        for s in range(k_max):
            start = s * context
            self.step(context_ids(0, context), range(context),
                      self._columns([s] * context, range(context)),
                      range(start, start + context), [(context, [(start, start + context)])],
                      prefill=True)

    def one_pass(self, k: int) -> float:
        from solm.engines.probe import FIRST_ID

        c, base = self.context, self.base
        reads = [(1, [(s * c, (s + 1) * c), (base + s, base + s + 1)]) for s in range(k)]
        t0 = time.perf_counter()
        self.logits = self.step([FIRST_ID + s for s in range(k)], [c] * k,
                                self._columns(range(k), [c] * k), range(base, base + k), reads)
        return time.perf_counter() - t0

    def close(self) -> None:
        self.step = None
