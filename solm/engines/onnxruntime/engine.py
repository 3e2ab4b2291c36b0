"""The ONNX Runtime engine: the model written as an ONNX graph that takes each pass's
attention mask (`solm.engines.onnxruntime`), run by onnxruntime's CPU kernels."""

from __future__ import annotations

import time
from typing import Sequence

from solm.engines.base import Engine

ONNX_TYPE_HELP = ("onnxruntime engine: the weight format of the ONNX graph (fp32 equals "
                  "torch's fp32 logits to ~1e-5 and costs least per extra token of a pass; "
                  "q8 and q4: blocks of 32 weights run by MatMulNBits, q8 closest to fp32; "
                  "i8: 7-bit weights per output row run by DynamicQuantizeMatMul, the "
                  "fastest for several tokens a pass, the roughest).")


class OnnxRuntimeEngine(Engine):
    name = "onnxruntime"
    summary = ("the model as an ONNX graph taking each pass's attention mask, run by "
               "onnxruntime: every system and layout, torch's masks unchanged")
    format_option = "onnx_types"  # the `solm bench step` option naming its formats
    exact_format = "fp32"
    own_settings = frozenset({"onnx_type"})
    format_setting = "onnx_type"

    def unavailable(self) -> str | None:
        from solm.engines.onnxruntime.session import onnxruntime_available

        return None if onnxruntime_available() else "onnxruntime (and onnx) are not installed"

    def install_hint(self) -> str:
        from solm.engines.onnxruntime.session import INSTALL_HINT

        return INSTALL_HINT

    def refusal(self, system: str, *, config=None, settings=None, model: str | None = None,
                policy=None, **_) -> str | None:
        if policy is not None and policy.needs_scores:
            return (f"--policy {policy.name} ranks pages by the attention they received, "
                    f"which the ONNX graph does not return: decode it with --engine torch")
        if getattr(settings, "quantize", None):
            return ("--quantize quantizes torch's weights; on onnxruntime the graph's format "
                    "is --onnx-type")
        return unsupported_architecture(model)

    def load(self, model: str, settings, dtype: str, device: str | None, system: str,
             num_registers: int = 16):
        """The model in fp32 on the CPU (the graph's source, once, and the decoding rules'
        vocabulary), and `settings.onnx` set to its graph (written on first use)."""
        from solm.core.models import load_decoder
        from solm.core.notices import notice
        from solm.engines.onnxruntime.session import graph_for

        loaded = load_decoder(model, dtype="fp32", device="cpu", system=system,
                              num_registers=num_registers)
        settings.onnx = str(graph_for(model, settings.onnx_type, system, num_registers,
                                      loaded=loaded))
        notice(f"engine onnxruntime: {settings.onnx_type} weights, fp32 KV ({settings.onnx})")
        return loaded

    def step(self, kind: str, settings, cells: int, sequences: int | None = None,
             independent: bool = False):
        """A session over a pool of `cells` cells behind the step `kind` speaks (requests
        never read each other's cells, so `independent` changes nothing here)."""
        super().step(kind, settings, cells)
        from solm.engines.onnxruntime.session import OrtModel
        from solm.engines.onnxruntime.step import OrtPagedKV, OrtPoolStep, OrtSlotStep

        model = OrtModel(settings.onnx, cells)
        if kind == "paged":
            return OrtPagedKV(model)
        if kind == "pool":
            return OrtPoolStep(model)
        return OrtSlotStep(model, kind)

    def sequential_loop(self, settings, cells: int):
        """One token a pass on the same graph (`solm.engines.onnxruntime.session.OrtOwnLoop`)."""
        from solm.engines.onnxruntime.session import OrtModel, OrtOwnLoop

        return OrtOwnLoop(OrtModel(settings.onnx, cells))

    def describe(self, settings, dtype: str) -> str:
        return f"onnxruntime ({settings.onnx_type} ONNX graph)"

    def measured_variant(self, settings) -> str:
        return settings.onnx_type

    def probes(self, model: str, formats: Sequence[str]) -> list:
        from solm.engines.onnxruntime.session import graph_for

        return [OrtProbe(graph_for(model, f), f) for f in formats]


class OrtProbe:
    """onnxruntime (`OrtModel`): k tokens in one session run, each reading its own
    sequence's copy of the context (what a shared one costs); the k new cells are
    overwritten by the next pass."""

    engine = "onnxruntime"

    def __init__(self, graph, variant: str, threads: int | None = None):
        from solm.engines.onnxruntime.session import graph_pass_bytes

        self.graph, self.variant, self.threads = graph, variant, threads
        self.weight_bytes = graph_pass_bytes(graph)
        self.model = None

    def prepare(self, k_max: int, context: int) -> None:
        import numpy as np

        from solm.engines.probe import context_ids
        from solm.engines.onnxruntime.session import OrtModel

        self.context, self.base = context, k_max * context
        self.model = OrtModel(self.graph, k_max * (context + 1), self.threads)
        causal = np.triu(np.full((context, context), -np.inf, np.float32), 1)
        for s in range(k_max):
            self.model.forward(context_ids(0, context), range(context), np.zeros(0, np.int64),
                               causal, range(s * context, (s + 1) * context), rows=[-1])

    def one_pass(self, k: int) -> float:
        import numpy as np

        from solm.engines.probe import FIRST_ID

        c = self.context
        read = np.arange(k * c)
        bias = np.full((k, k * c + k), -np.inf, np.float32)
        for s in range(k):
            bias[s, s * c:(s + 1) * c] = 0.0
            bias[s, k * c + s] = 0.0
        t0 = time.perf_counter()
        self.logits = self.model.forward([FIRST_ID + s for s in range(k)], [c] * k, read, bias,
                                         range(self.base, self.base + k))
        return time.perf_counter() - t0

    def close(self) -> None:
        self.model = None


def unsupported_architecture(model: str | None) -> str | None:
    """Why the model has no ONNX graph in solm (its config's architecture), or None."""
    from solm.engines.base import architecture_refusal
    from solm.engines.onnxruntime.graph import ARCHITECTURES

    return architecture_refusal(model, ARCHITECTURES, "has no ONNX graph in solm yet")
    from solm.core.models import model_architectures

    names = model_architectures(model)
    if names and not any(n in ARCHITECTURES for n in names):
        return (f"architecture {names[0]} has no ONNX graph in solm yet (supported: "
                f"{', '.join(ARCHITECTURES)})")
    return None
