"""`tip`: Thinking in Place — thought registers whose reuse frees KV pages."""

from __future__ import annotations


import typer

from solm.cli.common import DebugOption, handle_errors, show_control_tokens

app = typer.Typer(
    name="tip", no_args_is_help=True, rich_markup_mode="markdown",
    help="TIP (Thinking in Place): each reasoning step opens with a register `<reg_i>`; reusing "
         "a register kills the older step and the paged runtime frees its KV pages.")



@app.callback()
def main() -> None:
    """Keeps `tip` a command group (`tip tokens`) while it has a single subcommand."""

@app.command()
@handle_errors
def tokens(
    model: str = typer.Option("smollm2-135m", "--model", "-m"),
    registers: int = typer.Option(16, help="Number of thought registers."),
    debug: bool = DebugOption,
) -> None:
    """Show the register tokens and their ids in a model's tokenizer."""
    from solm.core.control_tokens import tip_tokens

    show_control_tokens(model, "tip", tip_tokens(registers), num_registers=registers)
