"""Pairing two output files for judging.

An outputs file is JSONL (or a JSON list, as AlpacaEval's `model_outputs.json`) with, per row,
the instruction (`instruction` or `prompt`) and the output (`output` or `response`), and
optionally `id` and `generator`. Rows are paired by `id` where every row of both files has one
(`pasta decode` and `pasta eval run` write ids), else by the instruction text (AlpacaEval's
files have no ids).
"""

from __future__ import annotations

from pathlib import Path

from solm.core.errors import DataError, SolmError
from solm.core.jsonl import read_rows_located
from solm.judge.job import Pair


def read_outputs(path: str | Path) -> list[dict]:
    """Rows as {id, instruction, output, generator, index}; a row without an instruction or an
    output raises DataError naming the file, row and field."""
    path = Path(path)
    out = []
    for i, (where, row) in enumerate(read_rows_located(path)):
        if not isinstance(row, dict):
            raise DataError("expected an object", path=where)
        instruction = row.get("instruction", row.get("prompt"))
        output = row.get("output", row.get("response"))
        if not isinstance(instruction, str):
            raise DataError("missing field 'instruction' (or 'prompt')", path=where)
        if output is None:
            raise DataError("missing field 'output' (or 'response')", path=where)
        out.append({"id": None if row.get("id") is None else str(row["id"]),
                    "instruction": instruction, "output": str(output),
                    "generator": str(row.get("generator") or path.stem),
                    "index": row.get("index", i)})
    return out


def make_pairs(baseline: list[dict], model: list[dict], limit: int | None = None) -> list[Pair]:
    """output_1 = baseline, output_2 = model, in the model file's order; rows of either file
    without a partner are left out (the caller reports how many)."""
    by_id = all(r["id"] is not None for r in baseline + model)
    key = (lambda r: r["id"]) if by_id else (lambda r: r["instruction"].strip())
    base = {}
    for r in baseline:
        base.setdefault(key(r), r)
    pairs = []
    for r in model:
        b = base.get(key(r))
        if b is None:
            continue
        pair_id = r["id"] if by_id else f"{b['index']}"
        pairs.append(Pair(pair_id, b["instruction"], b["output"], r["output"],
                          b["generator"], r["generator"],
                          b["index"] if isinstance(b["index"], int) else None))
        if limit is not None and len(pairs) >= limit:
            break
    if not pairs:
        raise SolmError("no row of the model's outputs has a partner among the baseline's "
                        "(paired by " + ("id" if by_id else "instruction") + ")")
    return pairs
