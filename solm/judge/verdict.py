"""Reading one verdict (which of A and B is better, as a probability) and combining the two
orders of a comparison.

One order: A = x, B = y. Its verdict `p_first` = P(A better). From log-probabilities: the first
of the reply's first few tokens whose alternatives include a label (a weak judge may write
"Response A" or "**A**" before the letter); P(A) and P(B) summed over the spellings of each
label (" A", "A", "`A"), then normalised over the two: a label absent from the alternatives
counts as probability 0. Without log-probabilities: the reply itself (`token` mode: a leading
letter, else the first "response A/B" or "first/second response" it names; `reply` mode: the
JSON's `better` and `confidence`).

Both orders: with p1 = P(x better) shown first and p2 = P(y better) shown first,
P(x better) = (p1 + 1 - p2) / 2, which cancels a judge's constant lean towards a position.
"""

from __future__ import annotations

import json
import math
import re

from solm.judge.prompt import LABELS

_DECOR = " \t\n`'\"*([{<"
_FIRST_LABEL = re.compile(r"^(?:[Rr]esponse\s*)?([AB])\b")  # the letter's case matters: "a"
_NAMED_LABEL = re.compile(r"\b(?:[Rr]esponse|[Oo]utput|[Aa]nswer)\s*\"?([AB])\b")
_ORDINAL = re.compile(r"\b(first|second)\s+(?:response|answer|output|one)\b", re.I)
_JSON = re.compile(r"\{[^{}]*\}", re.S)
_BETTER = re.compile(r"\"?[Bb]etter\"?\s*[:=]\s*\"?(?:[Rr]esponse\s*)?([AB])\b")
_CONFIDENCE = re.compile(r"\"?confidence\"?\s*[:=]\s*([0-9]*\.?[0-9]+)", re.I)


class VerdictError(ValueError):
    """A reply that names no winner; `reason` goes to the rejects file."""

    def __init__(self, reason: str, detail: str):
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}")


def _label(token: str) -> str | None:
    core = token.strip(_DECOR)
    return core if core in LABELS else None


def p_first_from_logprobs(top_logprobs: list[dict[str, float]] | None,
                          max_position: int = 6) -> float | None:
    """P(A better) from per-token alternatives, or None when no label is among them."""
    for alternatives in (top_logprobs or [])[:max_position]:
        mass = {label: 0.0 for label in LABELS}
        for token, logprob in alternatives.items():
            label = _label(token)
            if label is not None and logprob is not None and math.isfinite(logprob):
                mass[label] += math.exp(logprob)
        total = sum(mass.values())
        if total > 0:
            return mass[LABELS[0]] / total
    return None


def p_first_from_reply(text: str, mode: str) -> float:
    """P(A better) stated by the reply; raises VerdictError when it names no winner."""
    if mode == "token":
        m = _FIRST_LABEL.match(text.strip(_DECOR)) or _NAMED_LABEL.search(text)
        if m:
            return 1.0 if m.group(1) == LABELS[0] else 0.0
        m = _ORDINAL.search(text)
        if m:
            return 1.0 if m.group(1).lower() == "first" else 0.0
        raise VerdictError("unparsable_reply", text[:200])
    better, confidence = None, None
    for candidate in _JSON.findall(text):
        try:
            obj = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and str(obj.get("better", "")).strip(_DECOR).upper() in LABELS:
            better = str(obj["better"]).strip(_DECOR).upper()
            confidence = obj.get("confidence")
            break
    if better is None:  # not valid JSON: read the two fields where they stand
        m = _BETTER.search(text)
        if not m:
            raise VerdictError("unparsable_reply", text[:200])
        better = m.group(1)
        c = _CONFIDENCE.search(text)
        confidence = c.group(1) if c else None
    try:
        confidence = float(confidence) if confidence is not None else 1.0
    except (TypeError, ValueError):
        confidence = 1.0
    if confidence > 1.0 and confidence <= 100.0:  # a percentage
        confidence /= 100.0
    confidence = min(1.0, max(0.5, confidence)) if math.isfinite(confidence) else 1.0
    return confidence if better == LABELS[0] else 1.0 - confidence


def combine(p1_first: float, p2_first: float) -> float:
    """P(x better) from P(x better | x shown first) and P(y better | y shown first)."""
    return (p1_first + 1.0 - p2_first) / 2.0


def preference(p_second: float) -> float:
    """AlpacaEval's encoding: 1 + P(output_2 better), in [1, 2]; 1.5 is a tie."""
    return 1.0 + p_second


def winner(p_second: float, tie_band: float = 1e-9) -> int:
    """2 when output_2 is more likely better, 1 when output_1 is, 0 for an exact tie."""
    if abs(p_second - 0.5) <= tie_band:
        return 0
    return 2 if p_second > 0.5 else 1
