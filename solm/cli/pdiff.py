"""`pdiff`: Planned Diffusion — plan promises autoregressively, denoise chunks in parallel."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from solm.cli.common import (ConfigOption, DebugOption, ModelOption, QuietOption, VersionOption,
                             handle_errors, show_control_tokens)
from solm.cli.errors import SolmGroup

app = typer.Typer(
    cls=SolmGroup, name="pdiff", no_args_is_help=True, rich_markup_mode="markdown",
    help="Planned Diffusion: the model writes a plan of promises, then every planned chunk is "
         "denoised in parallel by masked diffusion, then decoding continues.")


@app.callback()
def main(version: bool = VersionOption) -> None:
    """Keeps `pdiff` a command group (`pdiff tokens`) while it has a single subcommand."""


@app.command()
@handle_errors
def tokens(
    model: str = ModelOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Show Planned Diffusion's control tokens (Pasta-Lang plus the mask token)."""
    from solm.core.control_tokens import MASK_TOKEN, pasta_tokens

    show_control_tokens(model, "pdiff", pasta_tokens()[:5] + [MASK_TOKEN])
