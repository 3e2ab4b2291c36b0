"""The settings of a PASTA decode: one field each, with its default, bounds and help; the
CLI's options, `pasta eval run`'s method knobs and a server's defaults all come from here."""

from __future__ import annotations

from dataclasses import dataclass, field

from solm.core.sampling import SamplingConfig
from solm.core.settings import setting

MODES = ("parallel", "sequential")
PENALIZE = ("all", "blocks")
MAX_NEW_TOKENS_CAP = 1 << 20  # far beyond any pool here; larger values are typos


def topic_cap_setting():
    """The cap on a promise's topic, declared once for every system that reads promises."""
    return setting(24, "A promise's topic longer than this is closed (flagged).", min=1)


@dataclass
class PastaDecodeConfig:
    mode: str = setting("parallel", "`parallel` acts on the tags; `sequential` decodes one "
                                    "token at a time with the same runtime (baseline).",
                        choices=MODES)
    max_new_tokens: int = setting(512, "Cap on generated tokens (all threads, tags "
                                        "included).", min=1, max=MAX_NEW_TOKENS_CAP)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_fork_tokens: int = setting(512, "A block longer than this is closed (flagged).", min=1)
    keep_promises: bool = setting(True, "Close a block that runs past its promise: N = 10T "
                                        "promised tokens for tokens=\"T\", plus max(4, N/4) "
                                        "(its `</async>` fed as the model's own; flagged "
                                        "promise_overrun).")
    close_nudge: float = setting(0.0, "From a block's promised N tokens on, raise its "
                                      "`</async>` logit by this x (tokens past N + 1) / "
                                      "(slack + 1): the block ends where the model leans to "
                                      "end it before the promise guard cuts a sentence "
                                      "(0 = off).", min=0.0)
    block_repeats: int = setting(3, "Close a block that writes the same 4-token run for the "
                                    "k-th time (flagged block_repeating); 0 turns the guard "
                                    "off.", min=0)
    max_promises: int = setting(8, "Promises the main thread may make before a `<sync/>`; "
                                   "a further promise is masked.", min=1)
    mask_block_eos: bool = setting(True, "Mask EOS inside a block, so a block ends with its "
                                         "`</async>`; off: an EOS sampled in a block reads "
                                         "as `</async>` (flagged eos_in_fork).")
    max_topic_tokens: int = topic_cap_setting()
    record_logits: bool = False
    # record each answer token's raw log-prob (the model's log-softmax at temperature 1, before
    # grammar masks and penalties) when it was sampled; None for tokens the runtime forced
    record_logprobs: bool = False
    penalize: str = setting("all", "Threads the repetition penalty and n-gram ban apply to: "
                                   "`all`, or `blocks` (async blocks only; the main thread's "
                                   "list markers repeat by design). Sequential mode: all.",
                            choices=PENALIZE)
