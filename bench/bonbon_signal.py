"""Did the preference rounds change what they were meant to? Starting model against final
models, on the prompts of one `pasta eval run`, with paired bootstrap intervals.

    python bench/bonbon_signal.py --run runs/prefs/frontier --baseline baseline-sft \
        --start pasta-sft --final lambda-0-r2 --final lambda-inf-r2 \
        --train-log runs/prefs/lambda-0/round-1/bonbon ... [--out FILE.json]

Per final model, over the prompts both it and the starting model answered:

- theoretical speedup per prompt (the baseline's critical path / the model's, as `pasta eval`
  counts it); the ratio of the two models' mean speedups, with a paired bootstrap 95% interval
  (prompts resampled together, 10,000 draws, seeded);
- well-formed answers (valid Pasta-Lang, not cut by the runtime) of each;
- mean content tokens (the answer text tokenized) of each, and their ratio;

and per BoNBoN run given with --train-log, its held-out implicit reward margin (policy minus
reference log-ratio, chosen minus rejected) at each evaluation.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def rows(run: Path, label: str) -> dict[str, dict]:
    path = run / "outputs" / f"{label}.jsonl"
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines()) if r}


def critical_path(row: dict) -> int:
    return max(1, row.get("critical_path") or row.get("generated_tokens")
               or row["content_tokens"])


def paired_bootstrap(start: list[float], final: list[float], draws: int = 10_000,
                     seed: int = 0) -> tuple[float, float]:
    """95% interval of mean(final) / mean(start), prompts resampled in pairs."""
    rng = random.Random(seed)
    n = len(start)
    ratios = []
    for _ in range(draws):
        idx = [rng.randrange(n) for _ in range(n)]
        s = sum(start[i] for i in idx)
        f = sum(final[i] for i in idx)
        ratios.append(f / s)
    ratios.sort()
    return ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]


def compare(run: Path, baseline: str, start: str, final: str) -> dict:
    from solm.decode.pasta.format_stats import is_well_formed

    base, a, b = rows(run, baseline), rows(run, start), rows(run, final)
    ids = sorted(set(base) & set(a) & set(b))
    sa = [critical_path(base[i]) / critical_path(a[i]) for i in ids]
    sb = [critical_path(base[i]) / critical_path(b[i]) for i in ids]
    lo, hi = paired_bootstrap(sa, sb)

    def well_formed(r: dict) -> bool:
        return is_well_formed(r.get("annotated", r["output"]), r.get("flags", []))

    wa = sum(well_formed(a[i]) for i in ids)
    wb = sum(well_formed(b[i]) for i in ids)
    ca = sum(a[i]["content_tokens"] for i in ids) / len(ids)
    cb = sum(b[i]["content_tokens"] for i in ids) / len(ids)
    ratio = (sum(sb) / len(sb)) / (sum(sa) / len(sa))
    return {
        "final": final, "prompts": len(ids),
        "mean_theoretical_speedup": {"start": round(sum(sa) / len(sa), 4),
                                     "final": round(sum(sb) / len(sb), 4)},
        "speedup_ratio": round(ratio, 4), "speedup_ratio_interval_95": [round(lo, 4),
                                                                        round(hi, 4)],
        "speedup_rises": lo > 1.0,
        "well_formed": {"start": wa, "final": wb, "drop": wa - wb, "ok": wa - wb <= 1},
        "mean_content_tokens": {"start": round(ca, 1), "final": round(cb, 1),
                                "ratio": round(cb / ca, 4), "ok": cb >= 0.8 * ca},
        "promises_mean": {"start": round(sum(a[i].get("promises", 0) for i in ids) / len(ids), 3),
                          "final": round(sum(b[i].get("promises", 0) for i in ids) / len(ids),
                                         3)},
    }


def margins(folder: Path) -> dict:
    log = folder / "train_log.jsonl"
    series = [(e["step"], round(e["eval_margin"], 4))
              for e in map(json.loads, log.read_text().splitlines()) if "eval_margin" in e]
    return {"run": str(folder), "eval_margin_by_step": series,
            "rises": len(series) >= 2 and series[-1][1] > series[0][1]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--baseline", required=True)
    p.add_argument("--start", required=True)
    p.add_argument("--final", action="append", required=True)
    p.add_argument("--train-log", type=Path, action="append", default=[])
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    report = {"run": str(args.run), "baseline": args.baseline, "start": args.start,
              "finals": [compare(args.run, args.baseline, args.start, f) for f in args.final],
              "margins": [margins(d) for d in args.train_log]}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
