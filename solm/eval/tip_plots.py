"""Bar charts of a `tip bench` summary: throughput and live KV per policy (and engine), ratios
against the same engine's dense on top."""

from __future__ import annotations

from pathlib import Path


def plot_tip_bench(summary: dict, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["policies"]
    engines = list(dict.fromkeys(r.get("engine", "torch") for r in rows))
    names = [r["policy"] if len(engines) == 1 else f"{r['policy']}\n{r['engine']}"
             for r in rows]
    colours = dict(zip(engines, ["#4c72b0", "#dd8452", "#55a868"]))
    fig, axes = plt.subplots(1, 2, figsize=(max(9.0, 1.6 * len(rows)), 3.8))
    panels = [("throughput_tok_s", "throughput_vs_dense", "tokens / s (all requests)"),
              ("mean_live_tokens", "live_kv_vs_dense", "live KV tokens read per step")]
    for ax, (key, ratio, label) in zip(axes, panels):
        bars = ax.bar(names, [r[key] for r in rows],
                      color=[colours[r.get("engine", "torch")] for r in rows])
        for bar, r in zip(bars, rows):
            if ratio in r:
                ax.annotate(f"{r[ratio]:.2f}x", (bar.get_x() + bar.get_width() / 2,
                                                 bar.get_height()),
                            ha="center", va="bottom", fontsize=9)
        ax.set_ylabel(label)
        ax.margins(y=0.15)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"tip bench: {summary['traces']} traces of {summary['mean_trace_tokens']:.0f} "
                 f"tokens, batch {summary['batch_size']}, pages of {summary['page_size']}"
                 f"{'' if len(engines) == 1 else ', ' + ' vs '.join(engines)}")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
