"""Prompts a model did not train on: the rows of a prompt file whose id is not in its training
rows, without long context, in file order (deterministic).

Rows are taken only after the last training row without promises (the SFT rows' plain part
is "the first 200 rows the rules annotator gave no promise"; an older annotator may have
picked other early rows), and only rows the annotator gave at most one promise (the SFT rows'
tagged part had two or more): so neither part of an SFT set built by an earlier version of
the annotator can hold them.

    python bench/heldout_prompts.py --prompts dolly.jsonl --trained runs/sft/sft_rows.jsonl \
        --annotated runs/sft/dolly_rules.jsonl --n 40 --out runs/prefs/dolly_heldout.jsonl

The PASTA preference rounds sample these (`make pasta-rounds`): `pasta-sft-cpu` trained on
`sft_rows.jsonl` (rule-annotated Dolly and SlimOrca rows), so every other Dolly row is new
to it. Rows keep their dataset answer (`response`), a quality reference for `pasta prefs`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=Path, required=True)
    p.add_argument("--trained", type=Path, required=True)
    p.add_argument("--annotated", type=Path, default=None,
                   help="The prompts' `pasta annotate --annotator rules` output: rows given "
                        "more than one promise are left out.")
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--max-chars", type=int, default=300)
    p.add_argument("--skip", type=int, default=0, help="Leave out the first N eligible rows.")
    p.add_argument("--exclude", type=Path, nargs="*", default=[],
                   help="Prompt files (e.g. AlpacaEval) whose prompts are never held out: "
                        "the evaluation must not see its own selection prompts.")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()

    from solm.core.records import load_records

    trained_rows = [json.loads(line) for line in args.trained.open() if line.strip()]
    trained = {r["id"] for r in trained_rows}
    plain = {r["id"] for r in trained_rows if r.get("promises") == 0}
    records = list(load_records(args.prompts))
    last_plain = max((i for i, r in enumerate(records) if r.id in plain), default=-1)
    promises = {}
    if args.annotated:
        for line in args.annotated.open():
            if line.strip():
                row = json.loads(line)
                promises[row["id"]] = row.get("promises", 0)
    from solm.annotate.mix import prompt_key

    banned = {prompt_key(r.prompt) for path in args.exclude for r in load_records(path)}
    kept, skipped = [], 0
    for r in records[last_plain + 1:]:
        if r.id in trained or len(r.prompt) > args.max_chars or not r.response:
            continue
        if prompt_key(r.prompt) in banned:
            continue
        if promises.get(r.id, 0) > 1:
            continue
        if skipped < args.skip:
            skipped += 1
            continue
        kept.append({"id": r.id, "prompt": r.prompt, "response": r.response})
        if len(kept) == args.n:
            break
    if len(kept) < args.n:
        raise SystemExit(f"only {len(kept)} eligible rows in {args.prompts}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in kept))
    print(f"{len(kept)} held-out prompts -> {args.out}")


if __name__ == "__main__":
    main()
