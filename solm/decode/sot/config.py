"""The settings of a Skeleton-of-Thought decode, declared once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from solm.core.sampling import SamplingConfig
from solm.core.settings import setting


@dataclass
class SotConfig:
    max_skeleton_tokens: int = setting(160, "Cap on the skeleton (stage 1), itself capped by "
                                            "max_new_tokens; the points then share what is "
                                            "left of it.", min=1)
    max_point_tokens: int = setting(128, "Cap on each point (stage 2).", min=1)
    # every generated token, both stages: the skeleton's cap is min(max_skeleton_tokens, this),
    # and the points share what the skeleton left (a step stops points past it, flagged)
    max_new_tokens: Optional[int] = setting(None, "Cap on every generated token, both stages "
                                                  "together (none: the stages' own caps).",
                                            min=1)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    record_logits: bool = False
    stop_at_newline: bool = True  # a point is one or two sentences: a newline ends it
