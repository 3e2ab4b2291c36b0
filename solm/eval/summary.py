"""Speed and quality of each method of a run, against its baseline.

Per prompt (the same prompt for both): realized speedup = baseline wall time / method wall
time; theoretical speedup = baseline critical path / method critical path (tokens decoded one
after another; a sequential baseline's is every token it decoded); parallelism = method
generated tokens / critical path (tokens decoded per step of the critical path). Lengths are
answer lengths (`content_tokens`: the answer text tokenized, the same count for every
method; see solm.eval.methods). Across prompts: geometric mean
(the thesis' figure) and arithmetic mean beside it. Quality: win rate and length-controlled
win rate of the judgments against the baseline (and against the reference, when judged).
When the run also decodes a method's own model sequentially (under another label), the
method's speed against that is reported too (`speed_vs_same_model`): a speedup without a
change of model.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from solm.core.systems.pasta_schedule import DISTRUST
from solm.eval.length_control import find_gamed_csv, length_controlled
from solm.eval.run import REFERENCE, judgments_path, load_outputs, read_run_file
from solm.core.stats import bootstrap_geomean_ci, geomean, repeated_ngram_share
from solm.decode.pasta.format_stats import is_well_formed
from solm.eval.winrate import read_judgments, recorded_judge

SPEED_FLOOR = 1e-3  # a prompt with an empty answer still counts (pulls the mean down)


def _means(values: list[float]) -> dict:
    if not values:
        return {"geomean": None, "mean": None}
    return {"geomean": round(geomean(values, floor=SPEED_FLOOR), 4),
            "mean": round(statistics.fmean(values), 4)}


def _critical_path(row: dict) -> int:
    return row.get("critical_path") or _generated(row)


def _generated(row: dict) -> int:
    """Tokens the method decoded (rows written before `generated_tokens` was recorded keep
    it in `total_tokens`)."""
    return row.get("generated_tokens") or row.get("total_tokens") or row["content_tokens"]


def _per_token(row: dict, key: str) -> float | None:
    value = row.get(key)
    return None if not value else value / max(row["content_tokens"], 1)


def speed(method_rows: dict[str, dict], base_rows: dict[str, dict]) -> dict:
    """Also, per content token (an answer's text tokens: Planned Diffusion's pads and tags do
    not count): forward passes and wall time, each as a geometric mean and as the baseline's
    per-token figure over the method's on the same prompt (> 1: fewer passes / less time per
    content token than the baseline)."""
    shared = [i for i in method_rows if i in base_rows]
    realized, theoretical, parallelism = [], [], []
    passes, wall_ms, passes_gain, wall_gain = [], [], [], []
    distrusted = 0  # prompts whose realized speedup is far above what their passes allow
    for i in shared:
        m, b = method_rows[i], base_rows[i]
        cp = max(m.get("critical_path") or 0, 1)
        mp, bp = _per_token(m, "forward_passes"), _per_token(b, "forward_passes")
        if mp:
            passes.append(mp)
            if bp:
                passes_gain.append(bp / mp)
        mw, bw = _per_token(m, "wall_s"), _per_token(b, "wall_s")
        if mw:
            wall_ms.append(1000 * mw)
            if bw:
                wall_gain.append(bw / mw)
        theoretical.append(_critical_path(b) / cp)
        if m.get("wall_s") and b.get("wall_s"):  # batched (quality) rows are untimed
            realized.append(b["wall_s"] / m["wall_s"])
            distrusted += realized[-1] > DISTRUST * theoretical[-1]
        parallelism.append(_generated(m) / cp)
    rows = [method_rows[i] for i in shared]
    annotated = [r for r in rows if r.get("annotated") is not None]
    ci = bootstrap_geomean_ci(passes_gain, floor=SPEED_FLOOR)
    wall = sum(r["wall_s"] for r in rows if r.get("wall_s"))
    if any(not r.get("wall_s") for r in rows):
        wall = 0  # some rows untimed: no throughput figure
    return {"prompts": len(shared),
            "realized_speedup": _means(realized), "theoretical_speedup": _means(theoretical),
            "parallelism": _means(parallelism),
            "passes_per_token": _means(passes), "wall_ms_per_token": _means(wall_ms),
            "passes_per_token_reduction": _means(passes_gain),
            # paired over prompts: the geometric mean's 95% bootstrap interval
            "passes_per_token_reduction_ci95": [round(x, 4) for x in ci] if ci else None,
            "wall_per_token_speedup": _means(wall_gain),
            "content_tokens_mean": round(statistics.fmean(r["content_tokens"] for r in rows), 1)
            if rows else None,
            "tokens_per_s": round(sum(r["content_tokens"] for r in rows) / wall, 2)
            if wall else None,
            "flagged": sum(1 for r in rows if r.get("flags")),
            "well_formed": round(sum(is_well_formed(r["annotated"], r.get("flags", []))
                                     for r in annotated) / len(annotated), 4)
            if annotated else None,
            # the answers' repeated word 3-grams (a degenerate loop shows here first)
            "repeated_3grams": round(statistics.fmean(
                repeated_ngram_share(r.get("output", "").split(), 3) for r in rows), 4)
            if rows else None,
            # blocks the runtime's guards closed (past their promise + slack, or looping),
            # over the blocks written: a model that keeps its promises needs none
            "guarded_blocks": round(sum(r.get("guarded_blocks", 0) for r in rows)
                                    / max(1, sum(r.get("threads", 0) for r in rows)), 4)
            if any("guarded_blocks" in r for r in rows) else None,
            # realized above theoretical by more than 10% on the same prompt: measurements
            # to distrust (a cold path, a busy machine), not results
            "distrusted_prompts": distrusted}


def chunk_health(rows: dict[str, dict]) -> dict | None:
    """Planned Diffusion's chunks over a method's answers: how many, the share that hold only
    pads, repeated n-grams inside them, and the share of well-formed answers."""
    rows = [r for r in rows.values() if "chunks" in r]
    if not rows:
        return None
    chunks = [c for r in rows for c in r["chunks"]]
    repeats = [r["chunk_repeated_ngrams"] for r in rows
               if r.get("chunk_repeated_ngrams") is not None]
    return {"answers": len(rows), "well_formed": round(sum(bool(r.get("well_formed"))
                                                           for r in rows) / len(rows), 4),
            "with_chunks": round(sum(bool(r["chunks"]) for r in rows) / len(rows), 4),
            "chunks": len(chunks),
            "pad_only_share": round(sum(c["pad_only"] for c in chunks) / len(chunks), 4)
            if chunks else None,
            "pad_share_of_slots": round(sum(c["pads"] for c in chunks)
                                        / max(sum(c["slots"] - 2 for c in chunks), 1), 4)
            if chunks else None,
            "repeated_ngrams": round(statistics.fmean(repeats), 4) if repeats else None}


def quality(path: Path, gamed_csv: Path | None) -> dict | None:
    if not path.exists():
        return None
    judgments = read_judgments(path)
    if not judgments:
        return None
    judge = recorded_judge(judgments)
    result = length_controlled(judgments, gamed_csv, judge)
    keep = ("win_rate", "lc_win_rate", "lc_method", "lc_note", "lc_warning", "standard_error",
            "n", "n_wins", "n_wins_base", "n_draws")
    out = {k: result.get(k) for k in keep if result.get(k) is not None}
    for k in ("win_rate", "lc_win_rate", "standard_error"):
        if out.get(k) is not None:
            out[k] = round(float(out[k]), 2)
    out["judge"] = judge
    return out


def summarize(run_dir: Path, gamed_csv: Path | None = None) -> dict:
    """summary.json of a run folder (written, and returned)."""
    run_dir = Path(run_dir)
    run = read_run_file(run_dir)
    gamed = find_gamed_csv(gamed_csv)
    baseline = run["baseline"]
    rows_of = {m["label"]: load_outputs(run_dir, m["label"]) for m in run["methods"]}
    base_rows = rows_of[baseline]
    methods = {}
    sequential_of = {m["model"]: m["label"] for m in run["methods"]
                     if m["kind"] == "sequential"}
    for m in run["methods"]:
        label = m["label"]
        rows = rows_of[label]
        entry = {"kind": m["kind"], "model": m["model"], "baseline": label == baseline,
                 "speed": speed(rows, base_rows)}
        if m.get("options"):
            entry["options"] = m["options"]
        health = chunk_health(rows)
        if health:
            entry["chunk_health"] = health
        same = sequential_of.get(m["model"])
        if m["kind"] != "sequential" and same is not None and same != baseline:
            # the method's own model decoded sequentially: its speedup without a model change
            entry["speed_vs_same_model"] = {"sequential": same,
                                            **speed(rows, rows_of[same])}
        if label == baseline:
            entry["vs_baseline"] = {"win_rate": 50.0, "lc_win_rate": 50.0,
                                    "lc_method": "by definition", "n": len(rows)}
        else:
            entry["vs_baseline"] = quality(judgments_path(run_dir, label), gamed)
        entry["vs_reference"] = quality(judgments_path(run_dir, label, REFERENCE), gamed)
        methods[label] = entry
    summary = {"run": str(run_dir), "baseline": baseline, "judge": run.get("judge"),
               "reference": run.get("reference"), "machine": run.get("machine"),
               "decode": run.get("decode"), "methods": methods}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
