"""The settings of a TIP decode (policy, budget, batch, cap, sampling), declared once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from solm.core.sampling import SamplingConfig
from solm.core.settings import setting
from solm.decode.tip.policies import POLICIES, policies_help


@dataclass
class TipDecodeConfig:
    policy: str = setting("tip", "Eviction policy: " + policies_help() + ".",
                          choices=tuple(POLICIES))
    budget: Optional[int] = setting(
        None, "KV budget in tokens (for the policies that read one: "
        + ", ".join(n for n, c in POLICIES.items() if c.needs_budget) + ").", min=1)
    batch_size: int = setting(16, "Requests decoded together (refilled as they end).", min=1)
    max_new_tokens: int = setting(4096, "Cap on generated tokens per sample.", min=1)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    record_logits: bool = False
    record_reads: bool = False  # keep, per decode step, the token indices attention read
    # keep each sampled token's log-prob under the model's distribution at the sampling
    # temperature (log_softmax(logits / T), before top-p): what GRPO recomputes in training
    record_logprobs: bool = False
    check_reads: bool = False  # assert every read slot is on a page the reader owns
