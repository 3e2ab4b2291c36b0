"""What every engine says about itself: whether it can run here, and how it times a pass."""

from __future__ import annotations

from typing import Sequence


class Engine:
    """One engine solm decodes on. A subclass names itself, says why it cannot run on this
    machine (None: it can), and gives a pass-cost probe per weight format it loads."""

    name: str = ""
    summary: str = ""
    format_option: str = ""  # the `solm bench step` option that lists its formats
    exact_format: str = ""  # the weight format whose logits equal the reference's (fp32)

    def unavailable(self) -> str | None:
        """Why this engine cannot run here (None: it can)."""
        return None

    def install_hint(self) -> str:
        """How to make an unavailable engine available."""
        return ""

    def refusal(self, system: str, *, config=None, settings=None, model: str | None = None,
                policy=None, **_) -> str | None:
        """Why this engine cannot run this decode of `system` (None: it can), from what the
        caller knows: the decode `config`, the engine `settings`, the `model`, a TIP `policy`."""
        return None

    def probes(self, model: str, formats: Sequence[str]) -> list:
        """A `solm.eval.step_cost.StepProbe`-shaped probe per weight format of `model`."""
        raise NotImplementedError
