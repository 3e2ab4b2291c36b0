"""GSM8K train problems a 135M model sometimes solves: those whose worked solution takes at
most `--max-lines` calculation lines (before `#### N`), in file order. GRPO needs groups whose
correctness varies; on the full set the embedded model is almost never right, and every
advantage would come from the KV term alone.

    python bench/gsm8k_short.py --source ~/.cache/solm/data/gsm8k_train.jsonl --max-lines 2 \
        --n 400 --out runs/tip/gsm8k_short.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", type=Path, required=True)
    p.add_argument("--max-lines", type=int, default=2)
    p.add_argument("--n", type=int, default=400)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    kept = []
    for line in args.source.open():
        if not line.strip():
            continue
        row = json.loads(line)
        steps = [x for x in row["answer"].split("\n") if x.strip() and not x.startswith("####")]
        if len(steps) <= args.max_lines:
            kept.append(row)
        if len(kept) >= args.n:
            break
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in kept))
    print(f"{len(kept)} problems with <= {args.max_lines} solution lines -> {args.out}")


if __name__ == "__main__":
    main()
