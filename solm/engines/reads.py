"""What every engine's step reads, shared below them all: a read (query rows over key slot
ranges, in order), the mask of each read from the structure's mask term (`segment_masks`),
and the segment a kernel attends under. torch's attention kernels and the ONNX graph's
bias both take their masks from here, so every engine evaluates the same rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from solm.core.structure import MaskTerm, pairwise

Read = tuple[int, Sequence[tuple[int, int]]]  # (query rows, key slot ranges in order)


@dataclass(frozen=True)
class Segment:
    """`rows` consecutive query rows reading the key slots `ranges` ([start, end) pairs, in
    this order) under `mask` (bool [rows, total length of the ranges])."""

    rows: int
    ranges: tuple[tuple[int, int], ...]
    mask: torch.Tensor


def segment_masks(attrs: Mapping[str, torch.Tensor], visible: MaskTerm, index: torch.Tensor,
                  reads: Sequence[Read]) -> list[Segment]:
    """Each read's mask, on the device the attribute columns `attrs` live on: `visible`
    over its query rows (the slots `index` writes, in order) and its key slots."""
    out, at = [], 0
    for rows, ranges in reads:
        ranges = tuple((int(a), int(b)) for a, b in ranges)
        keys = torch.cat([torch.arange(a, b, device=index.device) for a, b in ranges])
        q = {n: c[index[at:at + rows]] for n, c in attrs.items()}
        k = {n: c[keys] for n, c in attrs.items()}
        out.append(Segment(rows, ranges, pairwise(visible, q, k)))
        at += rows
    if at != len(index):
        raise ValueError(f"reads cover {at} rows of the {len(index)} fed")
    return out
