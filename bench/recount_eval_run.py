"""Bring a `pasta eval run` folder written before token accounting changed, to today's token accounting.

    python bench/recount_eval_run.py RUN_DIR [--tokenizer smollm2-135m]

Rows then recorded as `content_tokens` what each method decoded, and for SoT that counted
every skeleton token though the answer re-uses only the point texts (the earlier SoT rows
said 3,431 tokens for answers of 2,230). Per row this sets `content_tokens` to the answer
text tokenized (what every method's count means now), keeps the old count as
`generated_tokens` (SoT: also `point_tokens` = generated - skeleton), flags a SoT skeleton
that reached its cap (`skeleton_cap`), and marks the row `recounted`. Outputs, timings and
judgments are untouched; rerun `pasta eval report RUN_DIR` afterwards for the figures.
Idempotent: rows already recounted, or written with `generated_tokens`, are left alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from solm.core.chat import text_ids
from solm.core.jsonl import read_jsonl, write_jsonl
from solm.core.models import load_tokenizer


def recount(run_dir: Path, tokenizer: str) -> dict[str, int]:
    tok = load_tokenizer(tokenizer)
    run = json.loads((run_dir / "run.json").read_text())
    skeleton_cap = run.get("decode", {}).get("sot_skeleton_tokens")
    changed = {}
    for path in sorted((run_dir / "outputs").glob("*.jsonl")):
        rows, n = [], 0
        for row in read_jsonl(path):
            if not row.get("recounted") and "generated_tokens" not in row:
                old = row["content_tokens"]
                row["generated_tokens"] = row.get("total_tokens", old)
                if row.get("kind") == "sot":
                    row["point_tokens"] = old - row["skeleton_tokens"]
                    if skeleton_cap and row["skeleton_tokens"] >= skeleton_cap \
                            and "skeleton_cap" not in row["flags"]:
                        row["flags"] = sorted(row["flags"] + ["skeleton_cap"])
                row["content_tokens"] = len(text_ids(tok, row["output"]))
                row["recounted"] = True
                n += 1
            rows.append(row)
        write_jsonl(path, rows)
        changed[path.stem] = n
    return changed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--tokenizer", default="smollm2-135m")
    args = p.parse_args()
    print(json.dumps(recount(args.run_dir, args.tokenizer)))


if __name__ == "__main__":
    main()
