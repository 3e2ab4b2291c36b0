"""Bar charts of a `tip bench` summary: throughput and live KV per policy, ratios on top."""

from __future__ import annotations

from pathlib import Path


def plot_tip_bench(summary: dict, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["policies"]
    names = [r["policy"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    panels = [("throughput_tok_s", "throughput_vs_dense", "tokens / s (all requests)"),
              ("mean_live_tokens", "live_kv_vs_dense", "live KV tokens read per step")]
    for ax, (key, ratio, label) in zip(axes, panels):
        bars = ax.bar(names, [r[key] for r in rows], color="#4c72b0")
        for bar, r in zip(bars, rows):
            if ratio in r:
                ax.annotate(f"{r[ratio]:.2f}x", (bar.get_x() + bar.get_width() / 2,
                                                 bar.get_height()),
                            ha="center", va="bottom", fontsize=9)
        ax.set_ylabel(label)
        ax.margins(y=0.15)
    fig.suptitle(f"tip bench: {summary['traces']} traces of {summary['mean_trace_tokens']:.0f} "
                 f"tokens, batch {summary['batch_size']}, pages of {summary['page_size']}")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
