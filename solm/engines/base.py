"""What every engine says about itself: whether it can run here, which decodes it refuses,
how it loads a model, the step it gives each decode system, and how it times a pass."""

from __future__ import annotations

from typing import Any, Sequence

# the steps a decode system asks an engine for (`Engine.step`), by the call they speak:
# "slots": `solm.engines.torch.slots.SlotStep`'s (batched PASTA, SoT); "pdiff": the same call, a
# request's chunk slots written in Planned Diffusion's order; "pool": `PoolStep`'s (the
# one-request PASTA runtime); "paged": TIP's paged KV (`forward(rows, tokens, positions,
# visible)`, `end(row)`).
STEP_KINDS = ("slots", "pdiff", "pool", "paged")


def architecture_refusal(model: str | None, supported: Sequence[str], cannot: str) -> str | None:
    """Why an engine cannot take the model (its config names no architecture in
    `supported`): "architecture X {cannot} (supported: ...)", or None (a GGUF file, no
    model named, or a supported architecture)."""
    if model is None or str(model).endswith(".gguf"):
        return None
    from solm.core.models import model_architectures

    names = model_architectures(model)
    if names and not any(n in supported for n in names):
        return f"architecture {names[0]} {cannot} (supported: {', '.join(supported)})"
    return None


class Engine:
    """One engine solm decodes on. A subclass names itself, says why it cannot run on this
    machine (None: it can) and which decodes it refuses, loads a model for a decode, gives
    each decode system its step (None: the runtime's own torch step), and gives a pass-cost
    probe per weight format it loads."""

    name: str = ""
    summary: str = ""
    format_option: str = ""  # the `solm bench step` option that lists its formats
    exact_format: str = ""  # the weight format whose logits equal the reference's (fp32)
    format_setting: str = ""  # the engine setting naming the weight format it decodes
    reference: bool = False  # its logits are training's: the oracle every engine answers to
    # True: the runtimes' own torch steps run the model (torch dtypes, --compile and
    # --quantize apply, solm counts the bytes a step reads)
    torch_step: bool = False
    # the settings only this engine reads (a setting no engine claims applies to all)
    own_settings: frozenset[str] = frozenset()

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

    def settle(self, settings, model: str | None, system: str) -> None:
        """Set in `settings` what this engine will decode with once chosen, where the model
        decides it rather than the flags (before the run's settings are recorded)."""

    def load(self, model: str, settings, dtype: str, device: str | None, system: str,
             num_registers: int = 16) -> tuple[Any, Any]:
        """(model, tokenizer) for a decode of `system`'s tokens on this engine; an engine
        that runs its own weights records where they are in `settings`."""
        raise NotImplementedError

    def step(self, kind: str, settings, cells: int, sequences: int | None = None,
             independent: bool = False) -> Any | None:
        """The forward step of `kind` (`STEP_KINDS`) over `cells` KV cells, or None: the
        runtime builds its own torch step. `sequences`: at most this many at once (None: as
        many as the engine holds); `independent`: one stream per request, sharing nothing."""
        if kind not in STEP_KINDS:
            raise ValueError(f"no step kind {kind!r} (have {', '.join(STEP_KINDS)})")
        return None

    def sequential_loop(self, settings, cells: int) -> Any | None:
        """The engine's own one-token-a-pass loop (`generate(ids, n)` -> (ids, prefill_s,
        decode_s), `close()`), the yardstick a parallel decode on it is timed against; None:
        the model's `generate`."""
        return None

    def measured_variant(self, settings) -> str | None:
        """The `solm bench step` variant a decode with these settings runs (None: the
        fastest measured)."""
        return None

    def describe(self, settings, dtype: str) -> str:
        """The engine and its weights, for a line a user reads."""
        return f"{self.name} ({dtype})"

    def probes(self, model: str, formats: Sequence[str]) -> list:
        """A `solm.eval.step_cost.StepProbe`-shaped probe per weight format of `model`."""
        raise NotImplementedError
