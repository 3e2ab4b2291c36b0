"""How well a model writes Pasta-Lang: format statistics over a `pasta decode` output.

Two measures of parallel structure per row, both from the runtime's schedule:
- parallelism: tokens decoded per forward pass (tags included), the average number of
  threads running;
- content speedup: the response's text tokens (tags removed) per forward pass, the
  theoretical speedup over decoding the same text sequentially.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

from solm.decode import flags
from solm.core.stats import geomean

# a block left open at a length cap was closed by the runtime, not written: "block_cut"
STRUCTURAL_FLAGS = flags.PASTA_STRUCTURAL


def is_well_formed(annotated: str, flags: Iterable[str]) -> bool:
    """Valid Pasta-Lang text, and the runtime did not have to force a structural stop."""
    from solm.core.pasta_lang import validate

    return not validate(annotated) and not set(flags) & set(STRUCTURAL_FLAGS)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


@dataclass
class FormatStats:
    rows: int
    well_formed: float  # fraction of rows
    with_promise: float  # fraction of rows with >= 1 promise
    mean_parallelism_with_promise: float  # tokens per forward pass, rows with promises
    mean_content_speedup_with_promise: float  # text tokens per forward pass, same rows
    geomean_content_speedup: float  # over all rows (1.0 for rows without promises)
    mean_promises: float
    mean_content_tokens: float
    hit_max_tokens: float  # fraction cut by --max-new-tokens
    tokens_per_s: float  # content tokens / decode seconds, all rows

    def to_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


DECODE_FIELDS = {"annotated": str, "content_tokens": int, "critical_path": int}


def read_decode_rows(path) -> list[dict]:
    """The rows of a `pasta decode` output; anything else is a DataError naming the file,
    line and missing field."""
    from solm.core.errors import DataError
    from solm.core.jsonl import read_jsonl_numbered

    rows = []
    for line, row in read_jsonl_numbered(path):
        for name, kind in DECODE_FIELDS.items():
            if not isinstance(row.get(name), kind):
                raise DataError(f"not a `pasta decode` output row (needs {name} as "
                                f"{kind.__name__})", path=str(path), line=line, field=name)
        rows.append(row)
    if not rows:
        raise DataError("no decoded rows", path=str(path))
    return rows


def format_stats(rows: list[dict]) -> FormatStats:
    if not rows:
        raise ValueError("no decoded rows")
    n = len(rows)
    well = [is_well_formed(r["annotated"], r.get("flags", [])) for r in rows]
    promised = [r for r in rows if r.get("promises", 0) > 0]

    def speedup(r: dict) -> float:
        return r["content_tokens"] / max(1, r["critical_path"])

    def parallelism(r: dict) -> float:
        return r.get("total_tokens", r["content_tokens"]) / max(1, r["critical_path"])

    decode_s = sum(r.get("decode_s", 0.0) for r in rows)
    return FormatStats(
        rows=n, well_formed=sum(well) / n, with_promise=len(promised) / n,
        mean_parallelism_with_promise=_mean([parallelism(r) for r in promised]),
        mean_content_speedup_with_promise=_mean([speedup(r) for r in promised]),
        geomean_content_speedup=geomean([speedup(r) for r in rows], floor=1e-9, empty=0.0),
        mean_promises=sum(r.get("promises", 0) for r in rows) / n,
        mean_content_tokens=sum(r["content_tokens"] for r in rows) / n,
        hit_max_tokens=sum(flags.MAX_NEW_TOKENS in r.get("flags", []) for r in rows) / n,
        tokens_per_s=sum(r["content_tokens"] for r in rows) / decode_s if decode_s else 0.0)
