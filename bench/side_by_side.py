"""Two decode outputs of the same prompts side by side: per content token, forward passes,
and each file's flags, guarded blocks, pads. Prints a markdown table (and writes JSON).

    python bench/side_by_side.py on.jsonl off.jsonl --names on,off --out result.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path


def rows(path: Path) -> dict[str, dict]:
    return {str(r["id"]): r for r in map(json.loads, path.read_text().splitlines()) if r}


def figures(rs: list[dict]) -> dict:
    content = sum(r.get("content_tokens", 0) for r in rs)
    passes = sum(r.get("forward_passes", 0) for r in rs)
    threads = sum(r.get("threads", 0) for r in rs)
    flags: dict[str, int] = {}
    for r in rs:
        for f in r.get("flags", []):
            flags[f] = flags.get(f, 0) + 1
    out = {"rows": len(rs), "content_tokens": content, "forward_passes": passes,
           "content_per_pass": round(content / max(1, passes), 4),
           "geomean_content_per_pass": round(math.exp(statistics.fmean(
               math.log(max(r.get("content_tokens", 0), 1) / max(r.get("forward_passes", 1), 1))
               for r in rs)), 4) if rs else None,
           "rows_flagged": flags}
    if any("guarded_blocks" in r for r in rs):
        out["blocks"] = threads
        out["guarded_blocks"] = sum(r.get("guarded_blocks", 0) for r in rs)
    chunks = [c for r in rs for c in r.get("chunks", [])]
    if chunks:
        out["chunks"] = len(chunks)
        out["pads_over_slots"] = round(sum(c["pads"] for c in chunks)
                                       / max(1, sum(c["slots"] - 2 for c in chunks)), 4)
        out["denoise_steps"] = sum(c["steps"] for c in chunks)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--names", default=None)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    names = a.names.split(",") if a.names else [f.stem for f in a.files]
    data = [rows(f) for f in a.files]
    shared = sorted(set.intersection(*(set(d) for d in data)))
    result = {n: figures([d[i] for i in shared]) for n, d in zip(names, data)}
    result["prompts"] = len(shared)
    keys = sorted({k for n in names for k in result[n]})
    print("| figure | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for k in keys:
        print(f"| {k} | " + " | ".join(str(result[n].get(k, "")) for n in names) + " |")
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
