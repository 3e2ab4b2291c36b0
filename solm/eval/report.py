"""`pasta eval report`: report.md and the quality-speed plots of one or more run folders.

One point per (run, method): win rate against the run's baseline (length-controlled where it
was computed, else raw; the axis says which) against realized speedup, theoretical speedup
and parallelism (geometric means), with the raw win rate's standard error as a bar. The baseline sits at (1, 50%) by definition and is drawn
as a star; the Pareto frontier (no other point both faster and better) is drawn as a line.
"""

from __future__ import annotations

from pathlib import Path

from solm.eval.summary import summarize

AXES = (("realized_speedup", "realized speedup (geomean, wall time)"),
        ("theoretical_speedup", "theoretical speedup (geomean, baseline tokens / critical path)"),
        ("parallelism", "parallelism (geomean, content tokens / critical path)"),
        ("passes_per_token_reduction", "fewer forward passes per content token than the "
                                       "baseline (geomean)"),
        ("wall_per_token_speedup", "less wall time per content token than the baseline "
                                   "(geomean)"))


def points(summaries: list[dict]) -> list[dict]:
    out = []
    several = len(summaries) > 1
    for s in summaries:
        run_name = Path(s["run"]).name
        base = baseline_content(s)
        for label, m in s["methods"].items():
            q = m.get("vs_baseline") or {}
            win = q.get("lc_win_rate") if q.get("lc_win_rate") is not None else q.get("win_rate")
            out.append({"name": f"{run_name}/{label}" if several else label,
                        "baseline": m["baseline"], "kind": m["kind"], "model": m["model"],
                        "win": win, "raw": q.get("win_rate"), "lc": q.get("lc_win_rate"),
                        "se": q.get("standard_error"),
                        "lc_method": q.get("lc_method"),
                        "content_ratio": content_ratio(m["speed"].get("content_tokens_mean"),
                                                       base),
                        "well_formed": (m.get("chunk_health") or {}).get(
                            "well_formed", m["speed"].get("well_formed")),
                        **{axis: (m["speed"].get(axis) or {}).get("geomean")
                           for axis, _ in AXES}})
    return out


def baseline_content(summary: dict) -> float | None:
    """The mean content tokens of a run's baseline."""
    return next((m["speed"].get("content_tokens_mean") for m in summary["methods"].values()
                 if m["baseline"]), None)


def content_ratio(content: float | None, baseline: float | None) -> float | None:
    """A method's mean content tokens over the baseline's on the same prompts."""
    if content is None or not baseline:
        return None
    return content / baseline


def pareto(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both coordinates (higher is better), by x."""
    front = [p for p in pts if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in pts)]
    return sorted(set(front))


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "8")


def plot(pts: list[dict], axis: str, xlabel: str, ylabel: str, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    usable = [p for p in pts if p[axis] is not None and p["win"] is not None]
    fig, ax = plt.subplots(figsize=(8.4, 4.6))
    colors = {"sequential": "#555555", "pasta": "#c44e52", "apar": "#4c72b0", "sot": "#55a868",
              "pdiff": "#dd8452"}
    # every method its own marker, named in the legend beside the axes (labels written on
    # the points overlapped where methods sit close)
    markers = iter(MARKERS * (1 + len(usable) // len(MARKERS)))
    for p in usable:
        x = 1.0 if p["baseline"] else p[axis]
        if p.get("se"):  # the raw win rate's standard error, drawn on the plotted value
            ax.errorbar([x], [p["win"]], yerr=[p["se"]], color="#999999", capsize=3,
                        linewidth=1, zorder=2)
        ax.scatter([x], [p["win"]], s=180 if p["baseline"] else 70,
                   marker="*" if p["baseline"] else next(markers),
                   color=colors.get(p["kind"], "#8172b2"),
                   edgecolor="black", linewidth=0.6, zorder=3,
                   label=f"{p['name']} (baseline)" if p["baseline"] else p["name"])
    front = pareto([(1.0 if p["baseline"] else p[axis], p["win"]) for p in usable])
    if len(front) > 1:
        ax.plot(*zip(*front), linestyle="--", color="#999999", zorder=2, label="Pareto frontier")
    ax.axhline(50, color="#dddddd", linewidth=1, zorder=1)
    ax.axvline(1, color="#dddddd", linewidth=1, zorder=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.margins(x=0.2, y=0.2)
    if usable:  # never zoom in below +-10 points: a judge's noise would look like a result
        wins = [p["win"] for p in usable]
        ax.set_ylim(min(40.0, min(wins) - 5), max(60.0, max(wins) + 5))
    if usable:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    else:  # e.g. wall-time axes of a batched (untimed) run
        ax.text(0.5, 0.5, "no point has this figure (batched rows are untimed)",
                ha="center", va="center", transform=ax.transAxes, color="#777777")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


CONTENT_PNG = "content_vs_passes_per_token_reduction.png"


def plot_content(pts: list[dict], png: Path) -> None:
    """What a speed costs in length: each method's content (its mean over the baseline's)
    against its fewer forward passes per content token, the share of well-formed answers
    written beside it. A decode that buys passes by ending answers early sits low."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    usable = [p for p in pts if p["content_ratio"] is not None
              and (p["baseline"] or p["passes_per_token_reduction"] is not None)]
    fig, ax = plt.subplots(figsize=(8.4, 4.6))
    markers = iter(MARKERS * (1 + len(usable) // len(MARKERS)))
    for p in usable:
        x = 1.0 if p["baseline"] else p["passes_per_token_reduction"]
        well = "" if p["baseline"] or p["well_formed"] is None else \
            f" ({100 * p['well_formed']:.0f}% well-formed)"
        ax.scatter([x], [p["content_ratio"]], s=180 if p["baseline"] else 70,
                   marker="*" if p["baseline"] else next(markers), edgecolor="black",
                   linewidth=0.6, zorder=3,
                   label=f"{p['name']} (baseline)" if p["baseline"] else p["name"] + well)
    ax.axhline(1, color="#dddddd", linewidth=1, zorder=1)
    ax.axvline(1, color="#dddddd", linewidth=1, zorder=1)
    ax.set_xlabel(dict(AXES)["passes_per_token_reduction"])
    ax.set_ylabel("content tokens (mean) over the baseline's")
    ax.margins(x=0.2, y=0.2)
    if usable:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def _times(value) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _pct(value) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _fmt(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def report_files(run_dirs: list[Path], out_dir: Path) -> list[Path]:
    """Every file `write_report` writes: report.md, the plots, each run's summary.json."""
    return ([Path(out_dir) / "report.md"]
            + [Path(out_dir) / f"winrate_vs_{axis}.png" for axis, _ in AXES]
            + [Path(out_dir) / CONTENT_PNG]
            + [Path(d) / "summary.json" for d in run_dirs])


def write_report(run_dirs: list[Path], out_dir: Path, gamed_csv: Path | None = None) -> Path:
    summaries = [summarize(Path(d), gamed_csv) for d in run_dirs]
    pts = points(summaries)
    lc_all = all(p["lc"] is not None for p in pts if p["win"] is not None)
    methods = sorted({p["lc_method"] for p in pts if p["lc_method"] and not p["baseline"]})
    ylabel = ("LC win rate vs baseline (%)" if lc_all else "win rate vs baseline (%)")
    if lc_all and methods:
        ylabel += f" [{', '.join(methods)}]"
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs = []
    for axis, xlabel in AXES:
        png = out_dir / f"winrate_vs_{axis}.png"
        plot(pts, axis, xlabel, ylabel, png)
        pngs.append(png)
    plot_content(pts, out_dir / CONTENT_PNG)
    pngs.append(out_dir / CONTENT_PNG)
    lines = ["# Evaluation report", ""]
    for s in summaries:
        lines += [f"## {s['run']}", "",
                  f"Baseline: `{s['baseline']}`; judge: `{s.get('judge')}`; machine: "
                  f"{(s.get('machine') or {}).get('cpu', '?')}, "
                  f"{(s.get('machine') or {}).get('device', '?')}; decode: "
                  f"`{s.get('decode')}`", "",
                  "| method | kind | model | prompts | realized speedup (geo / mean) | "
                  "theoretical (geo / mean) | parallelism (geo) | tokens/s | win rate | "
                  "LC win rate | LC method | vs reference (win / LC) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for label, m in s["methods"].items():
            sp, q, r = m["speed"], m.get("vs_baseline") or {}, m.get("vs_reference") or {}
            lines.append(
                f"| {label}{' (baseline)' if m['baseline'] else ''} | {m['kind']} | "
                f"`{m['model']}` | {sp['prompts']} | "
                f"{_fmt(sp['realized_speedup']['geomean'])} / "
                f"{_fmt(sp['realized_speedup']['mean'])} | "
                f"{_fmt(sp['theoretical_speedup']['geomean'])} / "
                f"{_fmt(sp['theoretical_speedup']['mean'])} | "
                f"{_fmt(sp['parallelism']['geomean'])} | {_fmt(sp['tokens_per_s'], 1)} | "
                f"{_fmt(q.get('win_rate'), 1)} | {_fmt(q.get('lc_win_rate'), 1)} | "
                f"{q.get('lc_method') or '—'} | "
                f"{_fmt(r.get('win_rate'), 1)} / {_fmt(r.get('lc_win_rate'), 1)} |")
        lines += ["", "Per content token (geomeans; the baseline's figure over the method's on the "
                  "same prompt: > 1 is better), and Planned Diffusion's chunk health:", "",
                  "| method | passes / token | fewer passes than baseline (95% CI) | "
                  "content tokens (mean) | content vs baseline | wall ms / token | less wall than baseline | "
                  "well-formed | repeated word 3-grams | with chunks | chunks | pad-only "
                  "chunks | pads / slots | repeated 3-grams in chunks |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        base = baseline_content(s)
        for label, m in s["methods"].items():
            sp, h = m["speed"], m.get("chunk_health") or {}
            opts = f" `{m['options']}`" if m.get("options") else ""
            ci = sp.get("passes_per_token_reduction_ci95")
            ci_text = f" ({_fmt(ci[0])}-{_fmt(ci[1])})" if ci else ""
            well = h.get("well_formed", sp.get("well_formed"))
            lines.append(
                f"| {label}{opts} | {_fmt((sp.get('passes_per_token') or {}).get('geomean'), 3)}"
                f" | {_times((sp.get('passes_per_token_reduction') or {}).get('geomean'))}"
                f"{ci_text} | {_fmt(sp.get('content_tokens_mean'), 0)} | "
                f"{_times(content_ratio(sp.get('content_tokens_mean'), base))} | "
                f"{_fmt((sp.get('wall_ms_per_token') or {}).get('geomean'), 1)} | "
                f"{_times((sp.get('wall_per_token_speedup') or {}).get('geomean'))} | "
                f"{_pct(well)} | {_pct(sp.get('repeated_3grams'))} | "
                f"{_pct(h.get('with_chunks'))} | "
                f"{h.get('chunks', '—')} | {_pct(h.get('pad_only_share'))} | "
                f"{_pct(h.get('pad_share_of_slots'))} | {_pct(h.get('repeated_ngrams'))} |")
        notes = {m.get("vs_baseline", {}).get("lc_note") for m in s["methods"].values()
                 if m.get("vs_baseline")} - {None}
        warnings = {label: m["vs_baseline"]["lc_warning"] for label, m in s["methods"].items()
                    if (m.get("vs_baseline") or {}).get("lc_warning")}
        lines += [""]
        for label, m in s["methods"].items():
            same = m.get("speed_vs_same_model")
            if same:
                lines.append(
                    f"- `{label}` against `{same['sequential']}` (its own model, sequential): "
                    f"realized speedup {_fmt(same['realized_speedup']['geomean'])} (geomean) / "
                    f"{_fmt(same['realized_speedup']['mean'])} (mean), theoretical "
                    f"{_fmt(same['theoretical_speedup']['geomean'])}, over {same['prompts']} "
                    f"prompts")
        lines += [f"- LC: {n}" for n in sorted(notes)]
        lines += [f"- `{label}`: {w}" for label, w in warnings.items()]
        lines.append("")
    lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    report = out_dir / "report.md"
    report.write_text("\n".join(lines))
    return report
