"""Skeleton-of-Thought's two prompts (SoT's recipe, worded for this project) and a forgiving
reader of skeletons.

Stage 1 asks for a skeleton: 3-10 numbered points of a few words each, no detail, and primes
the answer with "1." as SoT does. Stage 2 asks, per point, for one or two sentences that expand
only that point, given the question and the whole skeleton; the text shared by every point
comes first, so the points' prompts share one prefix (and its KV).
"""

from __future__ import annotations

import re

MAX_POINTS = 10
MAX_POINT_WORDS = 16

SKELETON_INSTRUCTION = (
    "Do not answer the question yet. Write only the skeleton of an answer: a numbered list of "
    "3 to 10 points, one per line, each only a few words (3 to 5). No explanations, no "
    "sentences, no introduction.\n\nQuestion: {question}")
SKELETON_PRIMER = "1."

EXPAND_SHARED = (
    "You are writing one point of an answer whose skeleton is given below. Write only that "
    "point, in one or two sentences, and stop: do not write the other points.\n\n"
    "Question: {question}\n\nSkeleton:\n{skeleton}\n\n")
EXPAND_POINT = "Write point {index} now."
EXPAND_PRIMER = "{index}. {point}"

_MARKER = re.compile(
    r"^\s*(?:[-*•·]\s*)?(?:\*\*|__)?\s*(?:(?:point|step|item)\s*)?(\d{1,2})\s*[.):\]-]+"
    r"(?:\*\*|__)?\s*(.*)$", re.I)
_BULLET = re.compile(r"^\s*(?:[-*•·]|\+)\s+(.*)$")
_INLINE = re.compile(r"(?:^|\s)(\d{1,2})[.)]\s+")


def skeleton_prompt(question: str) -> str:
    return SKELETON_INSTRUCTION.format(question=question.strip())


def _clean(text: str) -> str:
    text = re.sub(r"(\*\*|__|`)", "", text).strip().strip(" :-–—").strip()
    words = text.split()
    return " ".join(words[:MAX_POINT_WORDS])


def parse_skeleton(text: str) -> list[str]:
    """The points of a skeleton, however it is written: numbered lines ("1.", "2)", "Point 3:",
    "**4.**"), bullets, several numbers on one line, or plain lines. Duplicates (ignoring case)
    and empty points are dropped; at most MAX_POINTS are kept."""
    lines = [ln for ln in text.replace("\r", "").split("\n") if ln.strip()]
    numbered = [m.group(2) for m in map(_MARKER.match, lines) if m]
    if len(numbered) < 2:
        inline = _INLINE.split(" ".join(lines))
        # split() gives [before, n1, text1, n2, text2, ...]
        candidates = [inline[i + 1] for i in range(1, len(inline) - 1, 2)]
        if len(candidates) >= 2:
            numbered = candidates
    if len(numbered) >= 2 or (numbered and len(lines) == 1):
        raw = numbered
    else:
        bullets = [m.group(1) for m in map(_BULLET.match, lines) if m]
        raw = bullets if len(bullets) >= 2 else lines
    points, seen = [], set()
    for item in raw:
        point = _clean(item)
        key = point.lower().rstrip(".")
        if point and key not in seen:
            seen.add(key)
            points.append(point)
    return points[:MAX_POINTS]


def format_skeleton(points: list[str]) -> str:
    return "\n".join(f"{i}. {p}" for i, p in enumerate(points, start=1))
