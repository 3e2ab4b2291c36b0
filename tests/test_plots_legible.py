"""Plots a person reads: the Pareto plot gives each method its own marker and names them in
a legend outside the axes (no label written over another), and the bench-step plot's title
stays inside the figure however long the CPU's name."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")


def test_the_pareto_plot_gives_every_method_its_own_marker_and_no_overlapping_text(
        tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from solm.eval import report

    figures = []
    monkeypatch.setattr(plt, "close", lambda fig: figures.append(fig))
    pts = [{"name": n, "kind": k, "baseline": n == "sequential", "speed": x, "win": w,
            "se": 2.0}
           for n, k, x, w in [("sequential", "sequential", 1.0, 50.0),
                              ("pasta", "pasta", 1.31, 49.0), ("pasta-r2", "pasta", 1.33, 49.5),
                              ("apar", "apar", 1.12, 48.0), ("sot", "sot", 1.25, 47.5),
                              ("pdiff", "pdiff", 1.28, 48.5)]]
    report.plot(pts, "speed", "speedup", "win rate", tmp_path / "p.png")
    (fig,) = figures
    ax = fig.axes[0]
    from matplotlib.collections import PathCollection

    markers = [c.get_paths()[0].vertices.tobytes() for c in ax.collections
               if isinstance(c, PathCollection)]
    assert len(markers) == 6 and len(set(markers)) == 6
    assert not ax.texts  # names live in the legend only
    legend = ax.get_legend()
    names = [t.get_text() for t in legend.get_texts()]
    assert {"pasta", "pasta-r2", "apar", "sot", "pdiff", "sequential (baseline)"} <= set(names)
    fig.canvas.draw()
    box, axes_box = legend.get_window_extent(), ax.get_window_extent()
    assert box.x0 >= axes_box.x1  # beside the axes, covering no point
    assert box.x1 <= fig.bbox.x1 + 1  # and inside the figure


def test_the_bench_step_plots_title_stays_inside_the_figure(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from solm.eval.step_cost import StepCost, plot_costs

    figures = []
    monkeypatch.setattr(plt, "close", lambda fig: figures.append(fig))
    cost = StepCost("llama.cpp", "q4_0", 1 << 26, ms={1: 6.0, 2: 8.8, 4: 11.9})
    title = ("smollm2-135m: one pass of k tokens (Intel(R) Xeon(R) Platinum 8481C CPU @ "
             "2.70GHz, 2 cores, AVX-512 + avx512_bf16 + AMX)")
    plot_costs([cost], 36e9, tmp_path / "s.png", title)
    (fig,) = figures
    fig.canvas.draw()
    shown = fig.axes[0].title
    box = shown.get_window_extent()
    assert box.x0 >= fig.bbox.x0 - 1 and box.x1 <= fig.bbox.x1 + 1
    assert shown.get_text().replace("\n", " ") == title
