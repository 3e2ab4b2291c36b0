"""One report per system for a `make repro-cpu-<system>` run: REPORT.md and summary.json in
the system's folder, written from what each step left on disk (stamps, training logs, the
evaluation's summary and plots), never from figures typed in.

`summary.json` holds the headline figures; `repro_table` turns the three into the README's
per-system table. Every figure is a small-slice figure: the slices are in each report.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from pathlib import Path
from typing import Callable

from solm.core.errors import SolmError
from solm.core.jsonl import read_json_file, read_jsonl

REPORTED_SYSTEMS = ("pasta", "pdiff", "tip")
TITLES = {"pasta": "PASTA", "pdiff": "Planned Diffusion", "tip": "TIP (Thinking in Place)"}
STAMPS = ".done"


def _json(path: Path) -> dict:
    if not path.exists():
        raise SolmError(f"{path}: not found; has this step of the run finished?")
    return read_json_file(path)


def _rows(path: Path) -> list[dict]:
    return list(read_jsonl(path)) if path.exists() else []


def _fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:{spec}}{suffix}"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def step_times(*folders: Path) -> list[tuple[str, dt.datetime, float | None]]:
    """(folder/step, finish time, minutes) for the stamps of `folders`, in the order they
    finished. Minutes: from the step's `.start` file (written when its last attempt began)
    to its stamp; a run without them falls back to the gap since the previous stamp of every
    system folder beside them (the steps of `make repro-cpu` run one after another), which
    is the step's own time when the run went straight through (the first stamp has none)."""
    def stamps(folder: Path):
        for stamp in sorted((folder / STAMPS).glob("*")):
            if stamp.suffix == ".start":
                continue
            yield (f"{folder.name}/{stamp.name}",
                   dt.datetime.fromtimestamp(stamp.stat().st_mtime, dt.timezone.utc), stamp)

    roots = {f.resolve().parent for f in folders}
    everything = sorted((s for r in roots for d in sorted(r.iterdir()) if d.is_dir()
                         for s in stamps(d)), key=lambda x: x[1])
    wanted = {f"{f.name}/{p.name}" for f in folders for p in (f / STAMPS).glob("*")}
    out, prev = [], None
    for name, when, stamp in everything:
        start = stamp.with_name(stamp.name + ".start")
        if start.exists():
            try:
                began = dt.datetime.fromtimestamp(int(start.read_text().split()[0]),
                                                  dt.timezone.utc)
                gap = (when - began).total_seconds() / 60
            except (ValueError, IndexError):
                gap = None
        else:
            gap = None if prev is None else (when - prev).total_seconds() / 60
        if name in wanted:
            out.append((name, when, gap))
        prev = when
    return out


def _steps_section(folders: list[Path]) -> str:
    times = step_times(*folders)
    if not times:
        return "No step has finished yet."
    rows = [[name, when.strftime("%Y-%m-%d %H:%M:%S UTC"), _fmt(gap, ".1f")]
            for name, when, gap in times]
    return ("Each step's stamp, written when its command finished. Minutes: from the start "
            "of the step's last attempt (its `.start` file) to its stamp; in runs made before "
            "those files existed, the time since the previous stamp of the whole run (the "
            "step's own time when the run went straight through; a resumed run adds its "
            "pause).\n\n"
            + _md_table(["step", "finished", "minutes"], rows))


def training_figures(folder: Path) -> dict:
    """Steps, minutes and the first/last held-out loss of a training folder's log."""
    log = _rows(folder / "train_log.jsonl")
    if not log:
        raise SolmError(f"{folder}/train_log.jsonl: missing or empty; did training finish?")
    evals = [r["eval_loss"] for r in log if "eval_loss" in r]
    end = next((r for r in reversed(log) if "train_runtime" in r), {})
    return {"steps": max((r.get("step", 0) for r in log), default=0),
            "minutes": end.get("train_runtime", float("nan")) / 60,
            "eval_loss_first": evals[0] if evals else None,
            "eval_loss_last": evals[-1] if evals else None,
            "complete": bool(_json(folder / "solm.json").get("complete")),
            "log": log}


def _training_section(models: dict[str, Path], base: Path) -> tuple[str, dict]:
    rows, figs = [], {}
    for name, folder in models.items():
        f = training_figures(folder)
        figs[name] = {k: v for k, v in f.items() if k != "log"}
        plot = folder / "loss.png"
        link = f"[loss]({os.path.relpath(plot, base)})" if plot.exists() else ""
        rows.append([name, str(f["steps"]), _fmt(f["minutes"], ".1f"),
                     _fmt(f["eval_loss_first"]), _fmt(f["eval_loss_last"]), link])
    return _md_table(["model", "steps", "minutes", "held-out loss at start", "at end", "curve"],
                     rows), figs


def _inside(path: Path, base: Path) -> bool:
    try:
        path.resolve().relative_to(base.resolve())
        return True
    except ValueError:
        return False


def _rel(path: Path, base: Path) -> str:
    return str(path.relative_to(base)) if _inside(path, base) else str(path.resolve())


def _plots(folder: Path, base: Path, batched: bool = False) -> str:
    """The report's plots; a batched run has no wall times, so its wall-time plots go."""
    plots = [p for p in sorted(folder.glob("*.png"))
             if not (batched and ("realized" in p.stem or "wall" in p.stem))]
    return "\n\n".join(f"![{p.stem}]({_rel(p, base)})" for p in plots)


def _batched(ev: dict) -> bool:
    return (ev.get("decode") or {}).get("batch_size", 1) > 1


SPEED_NOTE = ("Theoretical speedup is the thesis' figure: the baseline answer's tokens over "
              "the method's critical path, so an answer shorter than the baseline's raises it "
              "without any parallelism. Passes per content token (the baseline's over the "
              "method's, geometric mean) does not depend on length: it is the one to read for "
              "parallel decoding.")


def _machine(eval_summary: dict | None) -> str:
    if eval_summary and eval_summary.get("machine"):
        m = eval_summary["machine"]
        return f"{m.get('cpu', m.get('device'))}, torch {m.get('torch')}, {m.get('threads')} threads"
    from solm.engines.bandwidth import cpu_description

    return cpu_description()


# ---- PASTA -----------------------------------------------------------------------------

def _annotation_rows(common: Path) -> tuple[list[list[str]], dict]:
    rows, figs = [], {}
    for name in ("dolly_rules", "orca_rules"):
        data = _rows(common / f"{name}.jsonl")
        if not data:
            continue
        promised = [r for r in data if r.get("promises", 0) >= 2]
        figs[name] = {"rows": len(data), "with_2plus_promises": len(promised)}
        rows.append([f"{name}.jsonl", str(len(data)), str(len(promised)),
                     f"{len(promised) / len(data):.0%}"])
    mix = _rows(common / "sft_rows.jsonl")
    figs["sft_rows"] = {"rows": len(mix),
                        "parallel": sum(1 for r in mix if r.get("promises", 0) >= 2)}
    return rows, figs


def judge_caveat(judge: str | None) -> str:
    """What the win rates of a run can be read for."""
    if judge and judge.startswith("hf:smollm2"):
        return ("The judge is the embedded 135M model, whose verdicts agree with AlpacaEval's "
                "GPT-4 annotations at chance (docs: guides/evaluation.md): these win rates "
                "show that the judging step runs, not which answers are better. A real judge: "
                "`make repro-cpu-pasta JUDGE=gemini:gemini-2.5-flash` (GEMINI_API_KEY).")
    return ""


def _eval_table(summary: dict, kinds: tuple[str, ...]) -> tuple[str, dict]:
    header = ["method", "kind", "theoretical speedup", "passes / content token reduction",
              "content tokens", "win rate vs baseline", "LC win rate"]
    rows, figs = [], {}
    for label, m in summary["methods"].items():
        s, vb = m.get("speed", {}), m.get("vs_baseline") or {}
        geo = lambda k: (s.get(k) or {}).get("geomean")  # noqa: E731
        figs[label] = {"kind": m["kind"], "theoretical_speedup": geo("theoretical_speedup"),
                       "passes_per_token_reduction": geo("passes_per_token_reduction"),
                       "parallelism": geo("parallelism"),
                       "content_tokens_mean": s.get("content_tokens_mean"),
                       "win_rate": vb.get("win_rate"), "lc_win_rate": vb.get("lc_win_rate"),
                       "chunk_health": m.get("chunk_health")}
        rows.append([label, m["kind"], _fmt(geo("theoretical_speedup"), ".2f", "x"),
                     _fmt(geo("passes_per_token_reduction"), ".2f", "x"),
                     _fmt(s.get("content_tokens_mean"), ".0f"), _fmt(vb.get("win_rate"), ".1f"),
                     _fmt(vb.get("lc_win_rate"), ".1f")])
    return _md_table(header, rows), figs


def _forking_note(methods: dict) -> str:
    """Said when the trained PASTA models gain no forward passes per content token."""
    slow = {k: m for k, m in methods.items() if m["kind"] in ("pasta", "apar")
            and (m.get("passes_per_token_reduction") or 0) < 1.05}
    if not slow:
        return ""
    notes = []
    for k, m in slow.items():
        ratio = _fmt(m.get("passes_per_token_reduction"), ".2f", "x")
        if (m.get("parallelism") or 0) > 1.05:
            notes.append(f"{k} decodes in parallel ({_fmt(m['parallelism'], '.2f')} tokens a "
                         f"pass) yet gains no passes per content token ({ratio}): its tags "
                         "(promises, topics, `<sync/>`) take steps of their own")
        else:
            notes.append(f"{k} hardly forks ({ratio} passes per content token)")
    return ("; ".join(notes) + ". At this slice (a few hundred rows, minutes of training) "
            "that is what the models learned; the kept `pasta-sft-cpu`, trained on 841 rows, "
            "forks where it writes lists (`make demo`).")


def pasta_report(run: Path, common: Path) -> tuple[str, dict]:
    ev = _json(run / "eval" / "summary.json")
    ann_rows, ann = _annotation_rows(common)
    train_md, train = _training_section(
        {"Pasta-SFT": run / "pasta-sft", "Baseline-SFT": common / "baseline-sft",
         "BoNBoN (round 1)": run / "bonbon"}, run)
    prefs = _json(run / "prefs" / "summary.json")
    eval_md, methods = _eval_table(ev, ())
    summary = {"system": "pasta", "annotation": ann, "training": train,
               "prefs": {k: prefs.get(k) for k in ("prompts", "samples", "pairs",
                                                    "well_formed_rate", "chosen_mean_speedup",
                                                    "rejected_mean_speedup", "quality_weight")},
               "eval": {"prompts": next(iter(ev["methods"].values()))["speed"].get("prompts"),
                        "baseline": ev["baseline"], "judge": ev["judge"], "methods": methods}}
    md = [
        "## Data (rule annotation)",
        _md_table(["file", "rows", "with >= 2 promises", "share"], ann_rows),
        f"SFT mix: {ann['sft_rows']['rows']} rows, {ann['sft_rows']['parallel']} of them "
        "parallel (`pasta mix`).",
        "## Training", train_md,
        "## Preference sampling and BoNBoN",
        f"{prefs.get('prompts')} held-out Dolly prompts x {prefs.get('samples', 0) // max(1, prefs.get('prompts') or 1)} "
        f"samples, lambda = {prefs.get('quality_weight')}: {prefs.get('pairs')} pairs; "
        f"well-formed samples {_fmt(prefs.get('well_formed_rate'), '.0%')}; chosen samples' "
        f"mean speedup {_fmt(prefs.get('chosen_mean_speedup'))}, rejected "
        f"{_fmt(prefs.get('rejected_mean_speedup'))}.",
        "## Evaluation (AlpacaEval prompts)",
        f"{summary['eval']['prompts']} prompts, baseline `{ev['baseline']}`, judge "
        f"`{ev['judge']}`; decoded in batches, so speedups are theoretical (step counts), "
        "not wall time. The full report: [eval/report/report.md](eval/report/report.md).",
        eval_md, SPEED_NOTE, _forking_note(methods), judge_caveat(ev["judge"]),
        _plots(run / "eval" / "report", run, _batched(ev))]
    return "\n\n".join(m for m in md if m), summary


# ---- Planned Diffusion -----------------------------------------------------------------

def pdiff_report(run: Path, common: Path) -> tuple[str, dict]:
    ev = _json(run / "eval" / "summary.json")
    train_md, train = _training_section(
        {"Planned Diffusion SFT": run / "pdiff-sft", "AR baseline (Baseline-SFT)":
         common / "baseline-sft"}, run)
    log = training_figures(run / "pdiff-sft")["log"]
    parts = [r for r in log if "ar_loss" in r and "diffusion_loss" in r]
    decode = _rows(run / "decode.jsonl")
    chunks = [c for r in decode for c in r.get("chunks", [])]
    health = {"answers": len(decode),
              "well_formed": sum(bool(r.get("well_formed")) for r in decode) / max(1, len(decode)),
              "with_chunks": sum(bool(r.get("chunks")) for r in decode) / max(1, len(decode)),
              "chunks": len(chunks),
              "pad_only_chunks": sum(r.get("pad_only_chunks", 0) for r in decode)}
    eval_md, methods = _eval_table(ev, ())
    summary = {"system": "pdiff", "training": train, "decode": health,
               "eval": {"prompts": next(iter(ev["methods"].values()))["speed"].get("prompts"),
                        "baseline": ev["baseline"], "judge": ev["judge"], "methods": methods}}
    loss_line = ""
    if parts:
        loss_line = (f"AR loss {parts[0]['ar_loss']:.2f} -> {parts[-1]['ar_loss']:.2f}, "
                     f"diffusion loss {parts[0]['diffusion_loss']:.2f} -> "
                     f"{parts[-1]['diffusion_loss']:.2f} (first and last logged steps).")
    md = ["## Data", "The SFT mix of the PASTA run (`../common/sft_rows.jsonl`): rule-annotated "
          "rows whose promised chunks are laid out in 10 x N slots.",
          "## Training", train_md, loss_line,
          "## Decoding (`pdiff decode`, steps ratio 0.5)",
          f"{health['answers']} answers: {health['well_formed']:.0%} well-formed, "
          f"{health['with_chunks']:.0%} with chunks, {health['chunks']} chunks, "
          f"{health['pad_only_chunks']} pad-only." + (
              " No answer planned a chunk: at this slice the model has not learned to plan, "
              "so no denoising ran; the kept `pdiff-cpu`, trained about four times longer, "
              "does (docs: guides/pdiff.md)." if health["chunks"] == 0 else ""),
          "## Evaluation against AR decoding",
          f"{summary['eval']['prompts']} AlpacaEval prompts, judge `{ev['judge']}`, in batches "
          "(forward passes per content token, not wall time). Full report: "
          "[eval/report/report.md](eval/report/report.md).",
          eval_md, judge_caveat(ev["judge"]), _plots(run / "eval" / "report", run, _batched(ev))]
    return "\n\n".join(m for m in md if m), summary


# ---- TIP -------------------------------------------------------------------------------

def tip_report(run: Path, common: Path | None = None) -> tuple[str, dict]:
    traces = _rows(run / "traces.jsonl")
    reuse = sum(1 for r in traces if r.get("killed", 0) > 0)
    train_md, train = _training_section(
        {"TIP-SFT": run / "tip-sft", "Dense-SFT": run / "dense-sft",
         "TIP-GRPO": run / "tip-grpo"}, run)
    grpo = [r for r in training_figures(run / "tip-grpo")["log"] if "correct" in r]
    ev = _json(run / "eval" / "report" / "summary.json")
    points = ev["points"]
    rows = [[p["label"], p["data"], str(p["samples"]), _fmt(p["accuracy"], ".1%"),
             _fmt(p["mean_live_tokens"], ".0f"), _fmt(p["live_response_tokens"], ".0f"),
             _fmt(p["throughput_tok_s"], ".1f"), _fmt(p["decode_s"], ".1f")] for p in points]
    tip = next((p for p in points if p["policy"] == "tip"), None)
    dense = next((p for p in points if p["policy"] == "dense"), None)
    summary = {"system": "tip", "traces": len(traces),
               "traces_reusing_a_register": reuse / max(1, len(traces)),
               "training": train,
               "grpo": [{k: r.get(k) for k in ("step", "reward", "correct", "kv")} for r in grpo],
               "eval": {"points": points,
                        "tip_vs_dense_live_response_kv": (
                            tip["live_response_tokens"] / dense["live_response_tokens"]
                            if tip and dense and dense["live_response_tokens"] else None)}}
    grpo_rows = [[str(r.get("step")), _fmt(r.get("reward"), ".3f"), _fmt(r.get("correct"), ".2f"),
                  _fmt(r.get("kv"), ".3f")] for r in grpo]
    md = ["## Data (register annotation by rules)",
          f"{len(traces)} MATH solutions annotated; {reuse} ({reuse / max(1, len(traces)):.0%}) "
          "reuse a register (an older step is killed).",
          "## Training", train_md,
          "## GRPO (reward = correct - c x live KV)",
          _md_table(["step", "reward", "correct", "kv"], grpo_rows) if grpo_rows else
          "No GRPO step logged.",
          "## Evaluation (MATH-500 problems)",
          "Accuracy at 135M parameters and a few hundred tokens says little; the KV columns are "
          "the point. Full report: [eval/report/report.md](eval/report/report.md).",
          _md_table(["policy", "data", "samples", "accuracy", "live KV tokens",
                     "live response KV", "tokens/s", "decode s"], rows),
          _plots(run / "eval" / "report", run)]
    return "\n\n".join(md), summary


BUILDERS: dict[str, Callable[[Path, Path | None], tuple[str, dict]]] = {
    "pasta": pasta_report, "pdiff": pdiff_report, "tip": tip_report}


def write_report(system: str, run: Path, common: Path | None = None) -> Path:
    """REPORT.md and summary.json in `run`; returns REPORT.md's path."""
    if system not in BUILDERS:
        raise SolmError(f"system must be one of {', '.join(REPORTED_SYSTEMS)}, got {system!r}")
    if system != "tip" and common is None:
        raise SolmError(f"{system}: give --common (the folder with the shared SFT rows and "
                        "Baseline-SFT)")
    body, summary = BUILDERS[system](Path(run), Path(common) if common else None)
    folders = [Path(run)] + ([Path(common)] if common else [])
    ev_summary = Path(run) / "eval" / "summary.json"
    machine = _machine(json.loads(ev_summary.read_text()) if ev_summary.exists() else None)
    summary["machine"] = machine
    summary["steps"] = [{"step": s, "finished": t.isoformat(), "minutes": g}
                        for s, t, g in step_times(*folders)]
    head = [f"# {TITLES[system]}: the CPU reproduction (small slices)",
            f"Machine: {machine}. Written by `solm repro report` from the run's own files "
            f"({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC). Every figure here comes "
            "from small slices of the data and the embedded 135M model: it shows the pipeline "
            "works end to end, not the paper's results.",
            "## Steps", _steps_section(folders)]
    report = Path(run) / "REPORT.md"
    report.write_text("\n\n".join(head) + "\n\n" + body + "\n")
    (Path(run) / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return report


# ---- README table ----------------------------------------------------------------------

TABLE_BEGIN = "<!-- repro-table: begin (solm repro table) -->"
TABLE_END = "<!-- repro-table: end -->"


def _pasta_cells(s: dict) -> list[str]:
    methods = {k: m for k, m in s["eval"]["methods"].items() if m["kind"] in ("pasta", "apar")}
    figures = "; ".join(
        f"{k}: content tokens per forward pass {_fmt(m['passes_per_token_reduction'], '.2f', 'x')} "
        f"Baseline-SFT's, theoretical speedup {_fmt(m['theoretical_speedup'], '.2f', 'x')}, win rate "
        f"{_fmt(m['win_rate'], '.1f')}" for k, m in methods.items())
    return [f"{s['annotation']['sft_rows']['rows']} SFT rows, {s['prefs']['pairs']} pairs, "
            f"{s['eval']['prompts']} AlpacaEval prompts", figures or "–"]


def _pdiff_cells(s: dict) -> list[str]:
    m = next((m for m in s["eval"]["methods"].values() if m["kind"] == "pdiff"), None)
    return [f"{s['training']['Planned Diffusion SFT']['steps']} SFT steps, "
            f"{s['eval']['prompts']} AlpacaEval prompts",
            f"content tokens per forward pass "
            f"{_fmt(m and m['passes_per_token_reduction'], '.2f', 'x')} AR's; win rate vs AR {_fmt(m and m['win_rate'], '.1f')}; "
            f"{s['decode']['well_formed']:.0%} well-formed"]


def _tip_cells(s: dict) -> list[str]:
    pts = s["eval"]["points"]
    n = pts[0]["problems"] if pts else 0
    tip = next((p for p in pts if p["policy"] == "tip"), None)
    ratio = s["eval"]["tip_vs_dense_live_response_kv"]
    return [f"{s['traces']} traces, {len(s['grpo'])} GRPO steps, {n} MATH-500 problems",
            f"live response KV {_fmt(ratio, '.2f', 'x')} of Dense; accuracy "
            f"{_fmt(tip and tip['accuracy'], '.1%')} (135M: not meaningful)"]


def repro_table(repro: Path) -> str:
    """The README table: a row per system whose summary.json exists."""
    cells = {"pasta": _pasta_cells, "pdiff": _pdiff_cells, "tip": _tip_cells}
    rows = []
    for system in ("pasta", "tip", "pdiff"):
        path = Path(repro) / system / "summary.json"
        if not path.exists():
            continue
        s = _json(path)
        minutes = _minutes(s["steps"])
        rows.append([TITLES[system], f"`make repro-cpu-{system}`", *cells[system](s),
                     _fmt(minutes, ".0f"), f"`{Path(repro) / system / 'REPORT.md'}`"])
    if not rows:
        raise SolmError(f"{repro}: no system summary.json yet (run make repro-cpu first)")
    return _md_table(["system", "target", "slices (small)", "headline (small-slice figures)",
                      "minutes", "report"], rows)


def _minutes(steps: list[dict]) -> float | None:
    """The steps' own minutes summed (a step without a previous stamp, the run's first,
    counts as 0: its time is not known)."""
    gaps = [s["minutes"] for s in steps if s.get("minutes") is not None]
    return sum(gaps) if gaps else None


def update_readme(readme: Path, table: str) -> None:
    """Replace the text between the table markers of `readme` with `table`."""
    text = readme.read_text()
    if TABLE_BEGIN not in text or TABLE_END not in text:
        raise SolmError(f"{readme}: no '{TABLE_BEGIN}' ... '{TABLE_END}' markers")
    head, rest = text.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    readme.write_text(f"{head}{TABLE_BEGIN}\n{table}\n{TABLE_END}{tail}")
