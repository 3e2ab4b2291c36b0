"""`solm check-model MODEL`: which systems decode this model as the model itself computes."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from solm.cli.checks import one_of
from solm.cli.console import out_console
from solm.cli.flags import (ConfigOption, DebugOption, DeviceOption, QuietOption,
                            loads_models)

CHECK_MODEL_HELP = """Check that solm's runtimes decode MODEL exactly as the model computes.

For each system (sequential, PASTA, TIP, Planned Diffusion) the runtime teacher-forces a short
answer in that system's language; the reference is the model's own forward over the whole
sequence under the same structure mask, in transformers' eager attention. A system is `ok`
when the largest logit difference stays under --tolerance (fp32), `differs` otherwise (the
model's attention does not go through transformers' attention interface, or a feature the
runtimes do not implement changes its scores), or `refused` with the feature named (a sliding
window the check would pass, an encoder-decoder, ALiBi, M-RoPE, attention sinks). The table
of the model's features and what the runtimes do with each comes first. The exit status is 1
when any system differs.

Examples: `solm check-model smollm2-135m`, `solm check-model ./my-qwen3 --systems tip`,
`solm check-model Dream-org/Dream-v0-Instruct-7B --trust-remote-code --systems pdiff`.
"""


@loads_models
def check_model_command(
    model: str = typer.Argument(..., help="Alias, model folder or hub id."),
    systems: str = typer.Option("sequential,pasta,tip,pdiff", help="Comma-separated systems "
                                "to check."),
    tolerance: float = typer.Option(1e-3, min=0.0, help="Largest |logit difference| a system "
                                    "may show (fp32)."),
    dtype: str = typer.Option("fp32", callback=one_of("fp32", "bf16"), help="fp32 checks to "
                              "the tolerance; bf16 shows what a bf16 decode drifts by."),
    device: Optional[str] = DeviceOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from rich.table import Table

    from solm.core.errors import SolmError
    from solm.core.model_features import FEATURES
    from solm.core.models import load_model
    from solm.core.vocabulary import add_control_tokens
    from solm.decode.check_model import CHECKED_SYSTEMS, check_model

    chosen = tuple(s.strip() for s in systems.split(",") if s.strip())
    unknown = [s for s in chosen if s not in CHECKED_SYSTEMS]
    if unknown or not chosen:
        raise SolmError(f"--systems: {', '.join(unknown) or 'none given'}; choose from "
                        f"{', '.join(CHECKED_SYSTEMS)}")

    loaded: dict[str, tuple] = {}

    def load(control_tokens: str):
        """The model with a system's control tokens (one copy in memory at a time)."""
        if control_tokens not in loaded:
            loaded.clear()
            m, tok = load_model(model, dtype=dtype, device=device, attn_implementation="eager")
            add_control_tokens(m, tok, control_tokens, num_registers=4)
            loaded[control_tokens] = (m, tok)
        return loaded[control_tokens]

    base, _ = load("pasta")
    features = Table(title=f"{model}: features")
    for column in ("feature", "present", "solm's runtimes"):
        features.add_column(column)
    for f in FEATURES:
        if f.present(base.config):
            features.add_row(f.name, "yes", ("" if f.supported else "[red]unsupported:[/] ")
                             + f.note)
    del base
    out_console.print(features)
    results = check_model(load, chosen, tolerance)
    table = Table(title="systems")
    for column in ("system", "result", "max |Δ logit|"):
        table.add_column(column)
    colour = {"ok": "green", "differs": "red", "refused": "yellow"}
    for r in results:
        table.add_row(r.system, f"[{colour[r.status]}]{r.status}[/]",
                      "" if r.max_diff is None else f"{r.max_diff:.2e}")
    out_console.print(table)
    for r in results:  # the reasons in full, unwrapped by the table
        if r.detail:
            out_console.print(f"{r.system} {r.status}: {r.detail}", soft_wrap=True)
    if any(r.status == "differs" for r in results):
        raise typer.Exit(1)
