"""`solm export`: solm models in other engines' formats."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from solm.cli.console import info, out_console
from solm.cli.errors import command_group
from solm.cli.flags import ConfigOption, DebugOption, QuietOption, model_command

app = command_group("export", "Write solm models in other engines' formats.")

GGUF_HELP = """Write a model as a GGUF file llama.cpp loads: a model folder, a kept model
(`solm models`) or an alias; a LoRA output is merged into its parent first (a GGUF LoRA
adapter cannot add the control tokens). The model's control tokens are in the vocabulary as
whole tokens, and its solm.json facts (system, control tokens, position layout, registers) are
GGUF keys `solm.*`. The file is written beside OUT and renamed into place: an error leaves no
half-written file.

Types: f32 (llama.cpp's logits equal torch's fp32 ones to ~1e-4), f16, bf16, q8_0, and the
4-bit q4_1 / q4_0 (the embedded model's weights came from a Q4_1 file, so q4_1 gives them back
nearly unchanged); norms stay f32.

Examples:

- `solm export gguf pasta-sft-cpu runs/pasta-sft.q8_0.gguf --outtype q8_0`
- `solm export gguf runs/tip/sft runs/tip.f16.gguf`
"""


@app.command(help=GGUF_HELP)
@model_command
def gguf(
    model: str = typer.Argument(..., help="Model folder, kept model or alias."),
    out: Path = typer.Argument(..., help="The .gguf file to write."),
    outtype: str = typer.Option("f16", "--outtype", help="Weight type: f32, f16, bf16, q8_0, "
                                "q4_1 or q4_0."),
    system: Optional[str] = typer.Option(None, "--system", help="Add this system's control "
                                         "tokens (pasta, tip, pdiff) to a model whose "
                                         "solm.json names none (a base model)."),
    replace: bool = typer.Option(False, "--replace", help="Overwrite OUT when it exists "
                                 "(without it, an existing file is refused before any work)."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.cli.checks import check_paths
    from solm.cli.job_helpers import settings_from
    from solm.core.errors import SolmError
    from solm.core.paths import outputs_beside
    from solm.core.provenance import write_manifest
    from solm.engines.llamacpp.export import check_export, export_gguf

    check_export(model, out, outtype)
    check_paths([model] if Path(model).exists() else [], outputs_beside(out))
    if out.exists() and not replace:
        raise SolmError(f"{out}: already exists; pass --replace to overwrite it, or choose "
                        f"another output")
    info(f"exporting {model} to {out} ({outtype}) ...")
    done = export_gguf(model, out, outtype, system=system)
    write_manifest(out, "solm export gguf", settings_from(locals()),
                   inputs=[model] if Path(model).is_file() else [], model=model,
                   extra={"export": {"tensors": done.tensors, "vocab": done.vocab,
                                     "bytes": done.bytes, "outtype": done.outtype}})
    out_console.print(f"{done.path}: {done.tensors} tensors, vocabulary {done.vocab}, "
                      f"{done.bytes / 2**20:.1f} MiB ({done.outtype})")
