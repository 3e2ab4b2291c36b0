"""How well a model writes Pasta-Lang: format statistics over a `pasta decode` output."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable

# flags that mean the model broke the language (a length cap alone does not)
STRUCTURAL_FLAGS = ("eos_in_fork", "eos_with_open_forks", "fork_capped", "topic_capped",
                    "pool_full")


def is_well_formed(annotated: str, flags: Iterable[str]) -> bool:
    """Valid Pasta-Lang text, and the runtime did not have to force a structural stop."""
    from solm.core.pasta_lang import validate

    return not validate(annotated) and not set(flags) & set(STRUCTURAL_FLAGS)


@dataclass
class FormatStats:
    rows: int
    well_formed: float  # fraction of rows
    with_promise: float  # fraction of rows with >= 1 promise
    mean_parallelism_with_promise: float  # content tokens / critical path, rows with promises
    geomean_parallelism: float  # over all rows (1.0 for rows without promises)
    mean_promises: float
    mean_content_tokens: float
    hit_max_tokens: float  # fraction cut by --max-new-tokens
    tokens_per_s: float  # content tokens / decode seconds, all rows

    def to_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def format_stats(rows: list[dict]) -> FormatStats:
    if not rows:
        raise ValueError("no decoded rows")
    n = len(rows)
    well = [is_well_formed(r["annotated"], r.get("flags", [])) for r in rows]
    promised = [r for r in rows if r.get("promises", 0) > 0]
    par = [r["content_tokens"] / max(1, r["critical_path"]) for r in rows]
    par_promised = [r["content_tokens"] / max(1, r["critical_path"]) for r in promised]
    decode_s = sum(r.get("decode_s", 0.0) for r in rows)
    return FormatStats(
        rows=n, well_formed=sum(well) / n, with_promise=len(promised) / n,
        mean_parallelism_with_promise=(sum(par_promised) / len(par_promised)
                                       if par_promised else 0.0),
        geomean_parallelism=math.exp(sum(math.log(max(p, 1e-9)) for p in par) / n),
        mean_promises=sum(r.get("promises", 0) for r in rows) / n,
        mean_content_tokens=sum(r["content_tokens"] for r in rows) / n,
        hit_max_tokens=sum("max_new_tokens" in r.get("flags", []) for r in rows) / n,
        tokens_per_s=sum(r["content_tokens"] for r in rows) / decode_s if decode_s else 0.0)
