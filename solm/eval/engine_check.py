"""Engine equality, made checkable: the same prompts decoded greedily on two engines, and at
each prompt's first divergence the reference's own top-2 logit gap.

Two engines computing the same function pick the same greedy token wherever the reference's
top-1 beats its top-2 by more than their numerical difference; they may part only at a
near-tie. So a divergence is judged by the gap of the *reference* at that position (the
Hugging Face model's own forward pass over the prompt and the common prefix, an oracle
neither engine's code computes): at or under `tolerance` it is a near-tie, above it a bug
to find. Both decodes are plain sequential greedy decoding with no repetition penalty or
n-gram ban, so nothing but the logits decides a token; the largest logit difference between
the engines along the common prefix is reported beside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import torch

from solm.core.sampling import SamplingConfig
from solm.decode.pasta.config import PastaDecodeConfig

VERDICTS = ("equal", "near-tie", "beyond tolerance")


@dataclass
class EngineComparison:
    id: str
    tokens: int  # tokens the reference engine decoded
    first_divergence: int | None  # index into the answer; None: the answers are equal
    reference_gap: float | None  # the oracle's top-1 minus top-2 logit there
    other_took_reference_rank: int | None  # 2: the other engine took the oracle's top-2
    max_logit_diff: float  # |other - oracle| over the common prefix, every vocabulary entry
    verdict: str

    def to_dict(self) -> dict:
        return asdict(self)


def greedy_config(max_new_tokens: int) -> PastaDecodeConfig:
    """Sequential greedy decoding where only the logits decide (no penalty, no n-gram ban)."""
    return PastaDecodeConfig(mode="sequential", max_new_tokens=max_new_tokens,
                             record_logits=True,
                             sampling=SamplingConfig(temperature=0.0, repetition_penalty=1.0,
                                                     no_repeat_ngram=0))


def oracle_logits(model, prompt: Sequence[int], answer: Sequence[int]) -> torch.Tensor:
    """Row j: the Hugging Face forward's fp32 logits that choose answer[j]; one row more
    (len(answer) + 1 rows): the logits that choose the token after `answer`."""
    ids = torch.tensor([list(prompt) + list(answer)], device=next(model.parameters()).device)
    with torch.no_grad():
        logits = model(ids).logits[0].float().cpu()
    return logits[len(prompt) - 1:]


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two answers differ (one ending first counts); None: equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_answers(row_id: str, model, prompt: Sequence[int], reference: Sequence[int],
                    other: Sequence[int], other_logits: torch.Tensor | None, eos: int | None,
                    tolerance: float) -> EngineComparison:
    """Judge two greedy answers of one prompt. `other_logits` row j: the other engine's
    logits after feeding other[j] (what chose other[j + 1]), as `record_logits` keeps them;
    an answer shorter than the other ended with `eos` there."""
    at = first_difference(reference, other)
    common = len(reference) if at is None else at
    oracle = oracle_logits(model, prompt, list(reference[:common]))
    diff = 0.0
    if other_logits is not None:
        # other_logits[j] and oracle[j + 1] choose token j + 1 after the same prefix
        rows = min(common, other_logits.shape[0])
        if rows:
            diff = float((other_logits[:rows].float() - oracle[1:rows + 1]).abs().max())
    if at is None:
        return EngineComparison(row_id, len(reference), None, None, None, diff, "equal")
    row = oracle[at]
    top2 = row.topk(2).values
    gap = float(top2[0] - top2[1])
    taken = int(other[at]) if at < len(other) else eos
    rank = None if taken is None else int((row > row[taken]).sum()) + 1
    verdict = "near-tie" if gap <= tolerance else "beyond tolerance"
    return EngineComparison(row_id, len(reference), at, gap, rank, diff, verdict)


def summarize(rows: list[EngineComparison], tolerance: float) -> dict:
    counts = {v: sum(r.verdict == v for r in rows) for v in VERDICTS}
    gaps = [r.reference_gap for r in rows if r.reference_gap is not None]
    return {"prompts": len(rows), **{k.replace(" ", "_"): n for k, n in counts.items()},
            "tolerance": tolerance,
            "max_logit_diff": max((r.max_logit_diff for r in rows), default=0.0),
            "largest_gap_at_a_divergence": max(gaps, default=None),
            "holds": counts["beyond tolerance"] == 0}
