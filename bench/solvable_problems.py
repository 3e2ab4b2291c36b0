"""Problems a model sometimes solves: those a `tip eval run` answered right in some samples
but not all (GRPO learns only from groups whose correctness varies).

    tip eval run -o runs/tip/screen --data runs/tip/gsm8k_short.jsonl --policies tip \
        --samples 4 --max-new-tokens 256 --model runs/tip/tip-sft
    python bench/solvable_problems.py --run runs/tip/screen --problems runs/tip/gsm8k_short.jsonl \
        --out runs/tip/gsm8k_solvable.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True, help="A tip eval run folder.")
    p.add_argument("--problems", type=Path, required=True, help="The problems it decoded.")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--all-right-too", action="store_true",
                   help="Keep problems every sample got right as well.")
    args = p.parse_args()
    right: dict[str, list[bool]] = {}
    for line in (args.run / "samples.jsonl").open():
        if line.strip():
            r = json.loads(line)
            right.setdefault(r["id"], []).append(bool(r["correct"]))
    keep = {i for i, v in right.items()
            if any(v) and (args.all_right_too or not all(v))}
    rows = [json.loads(x) for x in args.problems.open() if x.strip()]
    kept = [r for r in rows if str(r.get("id", r.get("unique_id"))) in keep]
    args.out.write_text("".join(json.dumps(r) + "\n" for r in kept))
    print(f"{len(kept)} of {len(right)} screened problems solved sometimes -> {args.out}")


if __name__ == "__main__":
    main()
