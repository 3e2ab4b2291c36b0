"""What one forward pass costs when it feeds k tokens, one in each of k sequences, after a
context of C tokens each: the figure that decides whether a parallel thread can pay (k
threads advance in one pass only if that pass costs about what one token's does).

Each probe is one engine with one weight format; it lays out k_max sequences' contexts once,
then times passes of k new tokens (one per sequence, at position C) and takes them back out
of the cache, so every pass reads the same context. Beside the times: the weights' bytes
over the machine's copy bandwidth (`solm.decode.bandwidth`), the floor a pass that reads
every weight once cannot go below, whatever k.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import torch

# token ids the probes feed: any ordinary tokens do (a pass's cost does not depend on them)
FIRST_ID = 100


class StepProbe(Protocol):
    engine: str
    variant: str  # the weights' format: a GGUF type, a torch dtype
    weight_bytes: int

    def prepare(self, k_max: int, context: int) -> None: ...

    def one_pass(self, k: int) -> float:
        """Seconds of one pass of `k` new tokens (the cache left as before)."""
        ...

    def close(self) -> None: ...


@dataclass
class StepCost:
    engine: str
    variant: str
    weight_bytes: int
    ms: dict[int, float] = field(default_factory=dict)  # k -> median ms of a pass

    def times_one(self) -> dict[int, float]:
        """Each k's pass cost in one-token passes."""
        one = self.ms[min(self.ms)]
        return {k: round(v / one, 3) for k, v in self.ms.items()}

    def to_dict(self, bandwidth: float | None) -> dict:
        floor = (round(1000 * self.weight_bytes / bandwidth, 3) if bandwidth else None)
        return {"engine": self.engine, "variant": self.variant,
                "weight_mb": round(self.weight_bytes / 2**20, 1), "floor_ms": floor,
                "ms": {str(k): v for k, v in self.ms.items()},
                "times_one": {str(k): v for k, v in self.times_one().items()}}


def measure(probe: StepProbe, ks: Sequence[int], context: int, repeats: int,
            progress: Callable[[str], None] | None = None) -> StepCost:
    """The median of `repeats` passes at each k (after one untimed warm-up pass each)."""
    probe.prepare(max(ks), context)
    cost = StepCost(probe.engine, probe.variant, probe.weight_bytes)
    try:
        for k in ks:
            probe.one_pass(k)
            times = [probe.one_pass(k) for _ in range(repeats)]
            cost.ms[k] = round(1000 * statistics.median(times), 3)
            if progress:
                progress(f"{probe.engine} {probe.variant} k={k}: {cost.ms[k]} ms")
    finally:
        probe.close()
    return cost


def context_ids(seq: int, context: int) -> list[int]:
    """The tokens already in sequence `seq`'s cache (each sequence its own)."""
    return [FIRST_ID + (seq * 7 + j) % 5000 for j in range(context)]


class TorchProbe:
    """solm's torch step (`SlotStep`, the runtimes' eager path): k sequences in one pool,
    each reading its own context and its new token."""

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
        from solm.decode.slots import SlotStep

        self.context, self.base = context, k_max * context
        self.step = SlotStep(self.model, self.base + k_max,
                             and_masks(same_request, pasta_visible),
                             (*ATTR_NAMES, *BATCH_ATTR_NAMES))
        for s in range(k_max):
            start = s * context
            self.step(context_ids(s, context), range(context),
                      self._columns([s] * context, range(context)),
                      range(start, start + context), [(context, [(start, start + context)])],
                      prefill=True)

    def one_pass(self, k: int) -> float:
        c, base = self.context, self.base
        reads = [(1, [(s * c, (s + 1) * c), (base + s, base + s + 1)]) for s in range(k)]
        t0 = time.perf_counter()
        self.logits = self.step([FIRST_ID + s for s in range(k)], [c] * k,
                                self._columns(range(k), [c] * k), range(base, base + k), reads)
        return time.perf_counter() - t0

    def close(self) -> None:
        self.step = None


class LlamaCppProbe:
    """llama.cpp (`LlamaContext`, one unified cache): k tokens in one `llama_decode` call,
    each in its own sequence; the k new cells are removed after every pass."""

    engine = "llama.cpp"

    def __init__(self, gguf, variant: str, threads: int | None = None):
        from pathlib import Path

        self.gguf, self.variant, self.threads = str(gguf), variant, threads
        self.weight_bytes = Path(gguf).stat().st_size
        self.ctx = None

    def prepare(self, k_max: int, context: int) -> None:
        from solm.llamacpp.binding import LlamaContext, Token

        self.context = context
        self.ctx = LlamaContext(self.gguf, n_ctx=k_max * (context + 1) + 16, n_seq=k_max,
                                threads=self.threads)
        for s in range(k_max):
            ids = context_ids(s, context)
            self.ctx.decode([Token(t, p, s, logits=p == context - 1) for p, t in enumerate(ids)])

    def one_pass(self, k: int) -> float:
        from solm.llamacpp.binding import Token

        c = self.context
        t0 = time.perf_counter()
        self.logits = self.ctx.decode([Token(FIRST_ID + s, c, s) for s in range(k)])
        seconds = time.perf_counter() - t0
        for s in range(k):
            self.ctx.seq_rm(s, c, -1)
        return seconds

    def close(self) -> None:
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None


def floor_ms(weight_bytes: int, bandwidth: float) -> float:
    return 1000 * weight_bytes / bandwidth


def plot_costs(costs: Sequence[StepCost], bandwidth: float | None, path, title: str) -> None:
    """ms per pass against k, one line per engine and format, each floor dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for c in costs:
        ks = sorted(c.ms)
        line, = ax.plot(ks, [c.ms[k] for k in ks], marker="o", label=f"{c.engine} {c.variant}")
        if bandwidth:
            ax.axhline(floor_ms(c.weight_bytes, bandwidth), color=line.get_color(),
                       linestyle="--", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k: tokens in one pass (one per sequence)")
    ax.set_ylabel("ms per pass (median)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def torch_threads() -> int:
    return torch.get_num_threads()
