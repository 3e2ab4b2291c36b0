"""`pdiff`: Planned Diffusion — plan promises autoregressively, denoise chunks in parallel."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from solm.cli.flags import (model_command, ConfigOption, DebugOption, ModelOption,
                            QuietOption, VersionOption)
from solm.cli.job_helpers import show_control_tokens
from solm.cli.errors import command_group
from solm.cli.decode_command import decode_command
from solm.cli.options import train_command
from solm.cli.pdiff_demo import DEMO_HELP, demo
from solm.cli.pdiff_distill import DISTILL_HELP, distill
from solm.train.pdiff_sft import PdiffSFTConfig

app = command_group(
    "pdiff",
    "Planned Diffusion: the model writes a plan of promises, then every planned chunk is "
    "denoised in parallel by masked diffusion, then decoding continues.")


@app.callback()
def main(version: bool = VersionOption) -> None:
    """Planned Diffusion's commands."""


@app.command()
@model_command
def tokens(
    model: str = ModelOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Show Planned Diffusion's control tokens (Pasta-Lang plus the mask token)."""
    from solm.core.control_tokens import MASK_TOKEN, pasta_tokens

    from solm.core.control_tokens import PAD_TOKEN

    show_control_tokens(model, "pdiff", pasta_tokens()[:5] + [MASK_TOKEN, PAD_TOKEN])


PDIFF_DECODE_HELP = """Decode prompts by Planned Diffusion: the plan autoregressively (KV-cached) until
`<sync/>`, then every planned chunk laid out in its slots and denoised in parallel (one
forward pass per step for all chunks of all prompts in the batch), then on
autoregressively.

Output rows: response (tags removed, pads trimmed), annotated, forward passes (plan /
denoise), wall time, flags, well_formed, and per chunk its slots, pads, steps and whether
it is pad-only; the summary gives the share of well-formed answers and of pad-only
chunks. Without --prompts: three built-in prompts on which the kept `pdiff-cpu` plans
chunks, so a first try shows diffusion.

Examples:

- `pdiff decode -m pdiff-cpu "Give three tips for staying healthy."`
- `pdiff decode -m pdiff-cpu -p ~/.cache/solm/data/alpaca_eval.jsonl --limit 30 --steps-ratio 0.5 -o runs/pdiff/decode.jsonl`
"""

decode_command(app, "pdiff", PDIFF_DECODE_HELP)


PDIFF_SFT_HELP = """Train one model to plan autoregressively and to fill planned chunks by
masked diffusion (hybrid AR + diffusion SFT).

Rows are Pasta-Lang answers (`pasta annotate`, rules or an LLM). Each chunk is laid out in
10 x N slots (`<async>`, content, pad tokens, `</async>`; N grows so the content fits with a
pad and a random 0..`--extra-pads` more), and every sequence takes one forward pass under
Planned Diffusion's structure: the plan causal with the next-token loss, each chunk
bidirectional inside, hidden from its siblings and from later tokens until `<sync/>`. Per
sequence a masking rate t = (1 - eps) U + eps masks chunk slots; masked token j is predicted
from the logits at j - 1 (the convention `pdiff decode` samples with). Loss per sequence:
(AR sum + masked sum / t) / (AR targets + chunk slots); the log shows `ar_loss` and
`diffusion_loss` (per-token means) beside it. Everything else is `pasta sft`'s: LoRA or full,
bf16 where the hardware has it, checkpoints in OUT/checkpoints (rerun the same command to
resume), many GPUs through `accelerate launch` / `torchrun`.

Example (CPU): `pdiff sft --data runs/sft/sft_rows.jsonl --out runs/pdiff/pdiff-sft --lora-r 8 --lr 1e-3 --epochs 1 --batch-size 4 --max-len 512`
"""

train_command(app, "sft", PDIFF_SFT_HELP, PdiffSFTConfig, "solm.train.pdiff_sft:PdiffSFTTrainer",
              lambda t, c: f"pdiff-sft of {c.model} on {c.data} -> {c.out}")


app.command(name="distill", help=DISTILL_HELP)(distill)
app.command(name="demo", help=DEMO_HELP)(demo)
