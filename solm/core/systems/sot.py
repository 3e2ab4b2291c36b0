"""Skeleton-of-Thought's expansion stage as a structure: one shared prefix, then point threads.

SoT (Ning et al. 2023) asks a model for a skeleton of short points, then expands every point
given the question and the skeleton. Its own implementation sends one request per point, each
re-reading the whole prompt; solm decodes the points as threads of one KV pool instead, so the
prompt is read once and every step feeds one token per unfinished point in one forward pass.

Rules (the structure of the expansion stage; the skeleton stage is an ordinary decode):
- the prefix (thread 0: the expansion prompt shared by every point) is causal;
- point i (thread i >= 1: its own instruction line, then its expansion) sees the whole prefix
  and its own earlier tokens, never another point;
- positions: every point continues from the prefix's end, `len(prefix) + order`, so each point
  reads exactly as if it had been decoded alone after the prefix (tested: logits equal).

Malformed input is read plainly: a point with no tokens contributes nothing; tokens of a
thread id that never appeared start a new point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from solm.core.structure import IGNORE, Attrs, Structure, or_masks

NAME = "sot"
PREFIX = 0
ATTR_NAMES = ("thread", "order")


@dataclass
class SotAttrs:
    thread: int  # 0 the shared prefix, i >= 1 the i-th point
    order: int  # index within its thread
    pos: int


class SotTracker:
    """Assigns attributes as the prefix and then the points are fed (any interleaving)."""

    def __init__(self) -> None:
        self.prefix_len = 0
        self.point_len: dict[int, int] = {}

    def prefix(self, tok: int) -> SotAttrs:
        if self.point_len:
            raise RuntimeError("the shared prefix is complete once a point has started")
        attrs = SotAttrs(PREFIX, self.prefix_len, self.prefix_len)
        self.prefix_len += 1
        return attrs

    def point(self, index: int, tok: int) -> SotAttrs:
        if index < 1:
            raise ValueError("points are numbered from 1")
        order = self.point_len.get(index, 0)
        self.point_len[index] = order + 1
        return SotAttrs(index, order, self.prefix_len + order)


# ---- visibility: three terms over query (q) and key (k) attributes ------------------------

def prefix_causal(q: Attrs, k: Attrs) -> torch.Tensor:
    """The prefix reads its own past."""
    return (q["thread"] == PREFIX) & (k["thread"] == PREFIX) & (k["order"] <= q["order"])


def points_read_prefix(q: Attrs, k: Attrs) -> torch.Tensor:
    """Every point reads the whole prefix."""
    return (q["thread"] > PREFIX) & (k["thread"] == PREFIX)


def own_point(q: Attrs, k: Attrs) -> torch.Tensor:
    """A point reads its own earlier tokens (and itself)."""
    return (k["thread"] > PREFIX) & (k["thread"] == q["thread"]) & (k["order"] <= q["order"])


sot_visible = or_masks(prefix_causal, points_read_prefix, own_point)


def structure(prefix_ids: Sequence[int], points: Sequence[Sequence[int]]) -> Structure:
    """Mask, positions and targets of a prefix followed by its points laid out one after the
    other (the layout the runtime's pool has when points are fed in turn); each token's target
    is the next token of its own thread, the prefix's last token predicting nothing (each point
    starts with its own given instruction)."""
    tracker = SotTracker()
    attrs = [tracker.prefix(int(t)) for t in prefix_ids]
    ids = [int(t) for t in prefix_ids]
    targets = [*ids[1:], IGNORE] if ids else []
    for i, point in enumerate(points, start=1):
        point = [int(t) for t in point]
        attrs += [tracker.point(i, t) for t in point]
        ids += point
        targets += [*point[1:], IGNORE] if point else []
    t = {n: torch.tensor([getattr(a, n) for a in attrs], dtype=torch.long)
         for n in (*ATTR_NAMES, "pos")}
    return Structure(term=sot_visible, position_ids=t["pos"],
                     targets=torch.tensor(targets, dtype=torch.long), attrs=t)
