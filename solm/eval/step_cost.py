"""What one forward pass costs when it feeds k tokens, one in each of k sequences, after a
context of C tokens each: the figure that decides whether a parallel thread can pay (k
threads advance in one pass only if that pass costs about what one token's does).

Each probe is one engine with one weight format (its engine module gives it: `solm.engines`);
it lays out k_max sequences' contexts once,
then times passes of k new tokens (one per sequence, at position C) and takes them back out
of the cache, so every pass reads the same context. Beside the times: the weights' bytes
over the machine's copy bandwidth (`solm.engines.bandwidth`), the floor a pass that reads
every weight once cannot go below, whatever k.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

class StepProbe(Protocol):
    engine: str
    variant: str  # the weights' format: a GGUF type, a torch dtype
    weight_bytes: int

    def prepare(self, k_max: int, context: int) -> None: ...

    def one_pass(self, k: int) -> float:
        """Seconds of one pass of `k` new tokens (the cache left as before)."""
        ...

    def close(self) -> None: ...


# a row is flagged, not kept for `--engine auto`, when its repeats wander: at some k the
# upper quartile of the passes above this times the lower (a quiet CPU: ~1.01-1.10) ...
SPREAD_BOUND = 1.25
# ... or when a wider pass measured cheaper than a narrower one by more than this factor
# (k tokens never cost less than fewer: a busy spell made the narrower pass slow)
MONOTONE_SLACK = 1.05


@dataclass
class StepCost:
    engine: str
    variant: str
    weight_bytes: int
    ms: dict[int, float] = field(default_factory=dict)  # k -> median ms of a pass
    spread: dict[int, float] = field(default_factory=dict)  # k -> upper / lower quartile

    @property
    def flags(self) -> list[str]:
        """Why this row's figures cannot be trusted (empty: they can)."""
        out = [f"k={k} repeats spread {v:.2f}x > {SPREAD_BOUND}x"
               for k, v in sorted(self.spread.items()) if v > SPREAD_BOUND]
        ks = sorted(self.ms)
        out += [f"k={b} ({self.ms[b]:.2f} ms) cheaper than k={a} ({self.ms[a]:.2f} ms)"
                for i, a in enumerate(ks) for b in ks[i + 1:]
                if self.ms[b] * MONOTONE_SLACK < self.ms[a]]
        return out

    def times_one(self) -> dict[int, float]:
        """Each k's pass cost in one-token passes."""
        one = self.ms[min(self.ms)]
        return {k: round(v / one, 3) for k, v in self.ms.items()}

    def to_dict(self, bandwidth: float | None) -> dict:
        floor = (round(1000 * self.weight_bytes / bandwidth, 3) if bandwidth else None)
        return {"engine": self.engine, "variant": self.variant,
                "weight_mb": round(self.weight_bytes / 2**20, 1), "floor_ms": floor,
                "ms": {str(k): v for k, v in self.ms.items()},
                "times_one": {str(k): v for k, v in self.times_one().items()},
                "spread": {str(k): v for k, v in self.spread.items()},
                "flags": self.flags}


def measure(probe: StepProbe, ks: Sequence[int], context: int, repeats: int,
            progress: Callable[[str], None] | None = None) -> StepCost:
    """The median of `repeats` passes at each k (after one untimed warm-up pass each), and
    their quartile spread (`StepCost.flags` reads it)."""
    probe.prepare(max(ks), context)
    cost = StepCost(probe.engine, probe.variant, probe.weight_bytes)
    try:
        for k in ks:
            probe.one_pass(k)
            times = [probe.one_pass(k) for _ in range(repeats)]
            cost.ms[k] = round(1000 * statistics.median(times), 3)
            cost.spread[k] = round(quartile_spread(times), 3)
            if progress:
                progress(f"{probe.engine} {probe.variant} k={k}: {cost.ms[k]} ms")
    finally:
        probe.close()
    return cost


def quartile_spread(times: Sequence[float]) -> float:
    """The upper quartile of `times` over the lower (1.0 for fewer than 4 times)."""
    if len(times) < 4:
        return 1.0
    low, _, high = statistics.quantiles(times, n=4)
    return high / low if low > 0 else float("inf")


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
    import textwrap

    ax.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=9)  # a long CPU name wraps
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
