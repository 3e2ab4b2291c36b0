"""The settings of a Planned Diffusion decode, declared once (bounds checked by `check`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from solm.core.sampling import SamplingConfig
from solm.core.settings import check_settings, setting
from solm.decode.pasta.config import MAX_NEW_TOKENS_CAP, topic_cap_setting
from solm.decode.pdiff.limits import MAX_LENGTH_SCALE, MIN_LENGTH_SCALE

ORDERS = ("entropy", "confidence")


@dataclass
class PdiffDecodeConfig:
    max_new_tokens: int = setting(512, "Cap on the answer: main-thread tokens plus every "
                                       "chunk's slots.", min=1, max=MAX_NEW_TOKENS_CAP)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)  # the main thread
    # 0.5: on the kept model's selection prompts the fewest passes per content token (1.25x
    # the baseline's, against 1.23x at 0.25 and 1.18x at 1) at the same content and
    # well-formed share, with 9% repeated 3-grams inside chunks (24% at 0.25)
    steps_ratio: float = setting(0.5, "Denoising steps of a chunk = ceil(its masked slots x "
                                      "ratio): 1 unmasks one slot per step, 0.5 two.", above=0)
    confidence_threshold: Optional[float] = setting(
        None, "Also unmask, in any step, every slot whose top token has at least this "
        "probability (ahead of the schedule: fewer steps). Off by default.", above=0, max=1)
    length_scale: float = setting(1.0, "A chunk of `tokens=N` gets round(10 N x scale) slots; "
                                       "positions follow.", min=MIN_LENGTH_SCALE,
                                  max=MAX_LENGTH_SCALE)
    order: str = setting("entropy", "Unmask the lowest-entropy slots first, or the most "
                                    "confident.", choices=ORDERS)
    chunk_temperature: float = setting(0.0, "Sampling temperature inside chunks (0: each slot "
                                            "takes its most likely token).", min=0.0)
    max_continuation: int = setting(256, "Main-thread tokens after the first `<sync/>`: a "
                                         "runaway continuation stops there (flagged "
                                         "`continuation_cap`).", min=0)
    defer_pads: bool = setting(False, "Unmask the slots whose token is a pad only after the "
                                      "others in each step (against the pad trap: confident "
                                      "tail pads committed first pull their neighbours to "
                                      "pad).", flags=("--defer-pads",))
    pads_end_chunk: bool = setting(True, "Pads end a chunk (training lays them after the "
                                         "content): the tail of slots whose token is or "
                                         "would be a pad, and every masked slot after the "
                                         "first committed pad, take their pad at once; the "
                                         "chunk's steps shrink with its masked slots: no "
                                         "pass is spent on pads.")
    min_fill: float = setting(0.0, "The first share of a chunk's content slots never takes "
                                   "a pad: a chunk writes at least that much of what its "
                                   "promise reserved before it may end (0: pads anywhere).",
                              min=0.0, max=1.0)
    pad_confidence: Optional[float] = setting(
        None, "Commit a pad only where its probability reaches this (the model is sure the "
        "chunk is over); elsewhere the slot takes its most likely other token. Off by "
        "default.", above=0, max=1)
    max_topic_tokens: int = topic_cap_setting()
    record: bool = False  # keep each step's chunk tokens and logits (tests, analysis)

    def check(self) -> None:
        """Every knob in its range (NaN and infinities refused), named as the options are."""
        check_settings(self)
