"""Can a judge be trusted? Its verdicts on a published annotation file against the published
annotator's.

AlpacaEval's annotation files hold, per instruction, two outputs and the annotator's
preference (1: output_1 better, 2: output_2 better, fractional: soft; 0 or 1.5: no winner).
The judge is asked both orders of each pair (solm's judge job, through its cache); from its
judgments this reports:

- agreement: the share of pairs with a published winner on which the judge's winner is the
  same (a judge's exact tie counts half), with a Wilson 95% interval, and whether chance
  (50%) lies inside it;
- soft agreement: the mean probability the judge puts on the published winner;
- position bias: how much the judge favours whichever output is shown first, averaged over
  both orders of every pair (0 = none, 0.5 = always the first);
- undecided: the share of verdicts within 0.05 of 0.5.

The published annotator of AlpacaEval's files is GPT-4 (or GPT-4 Turbo): agreement measures
agreement with GPT-4's preferences, not with people's (AlpacaFarm's human cross-annotations
are only on the Hugging Face hub).
"""

from __future__ import annotations

from typing import Sequence

from solm.core.stats import Z95, wilson_interval  # noqa: F401 (Z95: the interval's level)


def published_winner(preference) -> int | None:
    """1 or 2 for a published preference, None when it names no winner."""
    try:
        p = float(preference)
    except (TypeError, ValueError):
        return None
    if not 1.0 <= p <= 2.0 or p == 1.5:
        return None
    return 2 if p > 1.5 else 1


def agreement_report(judgments: Sequence[dict], published: dict[str, object]) -> dict:
    """`judgments`: rows of solm's judge job (p_2, p_first); `published`: id -> preference."""
    decided, agree, soft = 0, 0.0, 0.0
    first_lean, undecided = [], 0
    for row in judgments:
        p2 = float(row["p_2"])
        pf = row["p_first"]
        # P(output_1 better | shown first) and P(output_2 better | shown first): a judge
        # without a lean averages 0.5 over the two
        first_lean.append((float(pf["output_1_first"]) + float(pf["output_2_first"])) / 2)
        if abs(p2 - 0.5) < 0.05:
            undecided += 1
        truth = published_winner(published.get(row["id"]))
        if truth is None:
            continue
        decided += 1
        if p2 == 0.5:
            agree += 0.5
        elif (p2 > 0.5) == (truth == 2):
            agree += 1
        soft += p2 if truth == 2 else 1 - p2
    n = len(judgments)
    rate = agree / decided if decided else None
    lo, hi = wilson_interval(agree, decided)
    return {
        "pairs_judged": n, "pairs_with_a_published_winner": decided,
        "agreement": None if rate is None else round(rate, 4),
        "interval": [round(lo, 4), round(hi, 4)], "interval_level": 0.95,
        "chance_inside_interval": lo <= 0.5 <= hi,
        "soft_agreement": None if not decided else round(soft / decided, 4),
        "position_bias": round(sum(first_lean) / n - 0.5, 4) if n else None,
        "undecided_share": round(undecided / n, 4) if n else None,
    }


def reading(report: dict) -> str:
    """What the measured agreement lets a win rate by this judge show, in one sentence."""
    if report["agreement"] is None:
        return "no pair had a published winner: nothing can be said"
    if report["chance_inside_interval"]:
        return ("chance lies inside the agreement's interval: this judge's verdicts cannot be "
                "told from coin flips on these pairs, so its win rates show nothing about "
                "quality")
    if report["agreement"] < 0.5:
        return ("the judge disagrees with the published annotator more often than chance: "
                "its preferences run against GPT-4's on these pairs")
    return ("the judge agrees with the published annotator (GPT-4) above chance: its win "
            "rates carry some signal, bounded by that agreement")
