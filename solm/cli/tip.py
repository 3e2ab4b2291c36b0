"""`tip`: Thinking in Place — thought registers whose reuse frees KV pages."""

from __future__ import annotations

from typing import Optional

import typer

from solm.cli.common import DebugOption, handle_errors, out_console

app = typer.Typer(
    name="tip", no_args_is_help=True, rich_markup_mode="markdown",
    help="TIP (Thinking in Place): each reasoning step opens with a register `<reg_i>`; reusing "
         "a register kills the older step and the paged runtime frees its KV pages.")


@app.command()
@handle_errors
def tokens(
    model: str = typer.Option("smollm2-135m", "--model", "-m"),
    registers: int = typer.Option(16, help="Number of thought registers."),
    debug: bool = DebugOption,
) -> None:
    """Show the register tokens and their ids in a model's tokenizer."""
    from solm.core.control_tokens import add_control_tokens, tip_tokens
    from solm.core.models import load_tokenizer

    tok = load_tokenizer(model)
    added = add_control_tokens(None, tok, "tip", num_registers=registers)
    out_console.print(f"{added} tokens added to {model}'s tokenizer ({len(tok)} total)")
    for t in tip_tokens(registers):
        out_console.print(f"  {tok.convert_tokens_to_ids(t):>6}  {t}")
