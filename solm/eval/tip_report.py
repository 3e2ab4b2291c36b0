"""`tip eval report`: report.md and plots of accuracy against live KV, throughput and decode
time, one point per policy and budget, per data set."""

from __future__ import annotations

import json
from pathlib import Path

from solm.eval.tip_eval import read_rows, summarise

# live KV of the response: the prompt's is the same under every policy
AXES = (("live_response_tokens", "live response KV per decode step (tokens, mean)", "kv"),
        ("throughput_tok_s", "throughput (generated tokens / s, batched)", "throughput"),
        ("decode_s", "decode time per sample (s)", "decode_time"))
COLORS = {"dense": "black", "tip": "tab:red", "streamingllm": "tab:blue", "h2o": "tab:green",
          "streaming-prompt": "tab:purple"}


def plot_points(summaries: list[dict], axis: str, xlabel: str, png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    placed: list[tuple[float, float]] = []
    for s in summaries:
        x = s.get(axis)
        if x is None:
            continue
        ax.scatter([x], [s["accuracy"]], color=COLORS.get(s["policy"], "tab:gray"), s=46,
                   marker="o" if s["budget"] is None else "s", zorder=3)
        # labels of points at the same height step down so they do not overprint
        same_row = sum(1 for _, y in placed if abs(y - s["accuracy"]) < 1e-9)
        placed.append((x, s["accuracy"]))
        ax.annotate(s["label"], (x, s["accuracy"]), textcoords="offset points",
                    xytext=(5, 4 - 10 * same_row), fontsize=8)
    budgeted = {}
    for s in summaries:
        if s["budget"] is not None and s.get(axis) is not None:
            budgeted.setdefault(s["policy"], []).append((s[axis], s["accuracy"]))
    for policy, pts in budgeted.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=COLORS.get(policy, "tab:gray"),
                alpha=0.5, lw=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy (mean fraction correct per problem)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)


def registers_in_use(summaries: list[dict]) -> dict:
    """Per data set: the TIP point's share of steps killed, and its live response KV over
    decodes of 256+ tokens against the dense point's."""
    out = {}
    for data in sorted({s["data"] for s in summaries}):
        tip = next((s for s in summaries if s["data"] == data and s["policy"] == "tip"), None)
        dense = next((s for s in summaries if s["data"] == data and s["policy"] == "dense"),
                     None)
        if tip is None:
            continue
        entry = {"share_steps_killed": tip["share_steps_killed"],
                 "steps_opened": tip["steps_opened"], "tip_decodes_256plus":
                 tip["decodes_256plus"]}
        if dense and tip["live_response_tokens_256plus"] and \
                dense["live_response_tokens_256plus"]:
            entry.update(dense_decodes_256plus=dense["decodes_256plus"],
                         tip_live_response_256plus=tip["live_response_tokens_256plus"],
                         dense_live_response_256plus=dense["live_response_tokens_256plus"],
                         live_response_ratio=round(tip["live_response_tokens_256plus"] /
                                                   dense["live_response_tokens_256plus"], 3))
        out[data] = entry
    return out


def _cell(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, list) and len(v) == 2:  # an interval
        return f"{_cell(v[0])}-{_cell(v[1])}"
    return f"{v:.3f}" if isinstance(v, float) and v < 10 else str(v)


def write_tip_report(run_dir: Path, out_dir: Path | None = None) -> Path:
    from solm.core.errors import SolmError

    out_dir = out_dir or run_dir / "report"
    rows = read_rows(run_dir / "samples.jsonl")
    if not rows:
        raise SolmError(f"{run_dir}: no samples.jsonl rows yet; run `tip eval run` first")
    timing = read_rows(run_dir / "timing.jsonl")
    summaries = summarise(rows, timing)
    settings = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() \
        else {}
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = ["# TIP evaluation", ""]
    if settings:
        lines += ["Settings: " + ", ".join(f"`{k}` {v}" for k, v in settings.items()
                                           if k not in ("data_files",)), ""]
    cols = ["label", "problems", "samples", "accuracy", "accuracy_ci95", "mean_live_tokens",
            "live_response_tokens", "peak_live_tokens", "peak_pages", "generated_tokens",
            "throughput_tok_s", "decode_s", "share_steps_killed", "capped", "engine"]
    engines = settings.get("engines", {})
    for s in summaries:
        s["engine"] = engines.get(s["label"], "torch" if "engines" not in settings else "?")
    for data in sorted({s["data"] for s in summaries}):
        subset = [s for s in summaries if s["data"] == data]
        lines += [f"## {data}", "", "| " + " | ".join(cols) + " |",
                  "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_cell(s[c]) for c in cols) + " |" for s in subset]
        lines.append("")
        for axis, xlabel, stem in AXES:
            png = out_dir / f"{data}_accuracy_vs_{stem}.png"
            plot_points(subset, axis, xlabel, png, f"{data}: accuracy vs {stem}")
            lines.append(f"![{data} {stem}]({png.name})")
        lines.append("")
    used = registers_in_use(summaries)
    if used:
        lines += ["## Registers in use", ""]
        for data, e in used.items():
            text = (f"- {data}: the TIP model opened {e['steps_opened']} steps, "
                    f"{e['share_steps_killed']:.1%} of them killed by a reuse")
            if "live_response_ratio" in e:
                text += (f"; over decodes of 256+ tokens ({e['tip_decodes_256plus']} TIP, "
                         f"{e['dense_decodes_256plus']} dense) its live response KV is "
                         f"{e['tip_live_response_256plus']} tokens against the dense "
                         f"model's {e['dense_live_response_256plus']}: "
                         f"**{e['live_response_ratio']:.2f}x**")
            lines.append(text + ".")
        lines.append("")
    (out_dir / "summary.json").write_text(json.dumps({"points": summaries,
                                                      "registers_in_use": used}, indent=1))
    report = out_dir / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report
