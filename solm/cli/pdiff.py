"""`pdiff`: Planned Diffusion — plan promises autoregressively, denoise chunks in parallel."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from solm.cli.common import (MAX_NEW_TOKENS_CAP, ConfigOption, DebugOption, DeviceOption,
                             DtypeOption, ForceOption, ModelOption, QuietOption,
                             RepetitionPenaltyOption, SeedOption, ShardOption, TemperatureOption,
                             TopPOption, finish_shard, sharded, take_shard,
                             VersionOption, check_paths, console, decode_flags, finite_above,
                             handle_errors, info, one_of, out_console, progress, settings_from,
                             show_control_tokens)
from solm.cli.errors import SolmGroup
from solm.decode.pdiff.limits import MAX_LENGTH_SCALE, MIN_LENGTH_SCALE
from solm.cli.options import train_command
from solm.train.pdiff_sft import PdiffSFTConfig

app = typer.Typer(
    cls=SolmGroup, name="pdiff", no_args_is_help=True, rich_markup_mode="markdown",
    help="Planned Diffusion: the model writes a plan of promises, then every planned chunk is "
         "denoised in parallel by masked diffusion, then decoding continues.")


@app.callback()
def main(version: bool = VersionOption) -> None:
    """Planned Diffusion's commands."""


@app.command()
@handle_errors
def tokens(
    model: str = ModelOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Show Planned Diffusion's control tokens (Pasta-Lang plus the mask token)."""
    from solm.core.control_tokens import MASK_TOKEN, pasta_tokens

    from solm.core.control_tokens import PAD_TOKEN

    show_control_tokens(model, "pdiff", pasta_tokens()[:5] + [MASK_TOKEN, PAD_TOKEN])


StepsRatioOption = typer.Option(1.0, callback=finite_above(0), help="Denoising steps of a "
                                "chunk = ceil(its masked slots x ratio): 1 unmasks one slot "
                                "per step, 0.5 two.")
ThresholdOption = typer.Option(None, callback=finite_above(0), help="Also unmask, in any "
                               "step, every slot whose top token has at least this "
                               "probability (ahead of the schedule: fewer steps). Off by "
                               "default.")
LengthScaleOption = typer.Option(1.0, min=MIN_LENGTH_SCALE, max=MAX_LENGTH_SCALE,
                                 help="A chunk of `tokens=N` gets round(10 N x scale) slots; "
                                 "positions follow.")
OrderOption = typer.Option("entropy", callback=one_of("entropy", "confidence"),
                           help="Unmask the lowest-entropy slots first, or the most "
                                "confident.")
ChunkTemperatureOption = typer.Option(0.0, min=0.0, help="Sampling temperature inside chunks "
                                      "(0: each slot takes its most likely token).")
DeferPadsOption = typer.Option(False, "--defer-pads", help="Unmask the slots whose token is "
                               "a pad only after the others in each step (against the pad "
                               "trap: confident tail pads committed first pull their "
                               "neighbours to pad).")
MaxContinuationOption = typer.Option(256, min=0, help="Main-thread tokens after the first "
                                     "`<sync/>`: a runaway continuation stops there (flagged "
                                     "`continuation_cap`).")


def decode_config(max_new_tokens: int, temperature: float, top_p: float, seed: int,
                  repetition_penalty: float, steps_ratio: float,
                  confidence_threshold: float | None, length_scale: float, order: str,
                  chunk_temperature: float, max_continuation: int, defer_pads: bool = False):
    from solm.core.sampling import SamplingConfig
    from solm.decode.pdiff.runtime import PdiffDecodeConfig

    if confidence_threshold is not None and confidence_threshold > 1:
        raise typer.BadParameter("--confidence-threshold is a probability: at most 1")
    return PdiffDecodeConfig(
        max_new_tokens=max_new_tokens,
        sampling=SamplingConfig(temperature=temperature, top_p=top_p, seed=seed,
                                repetition_penalty=repetition_penalty),
        steps_ratio=steps_ratio, confidence_threshold=confidence_threshold,
        length_scale=length_scale, order=order, chunk_temperature=chunk_temperature,
        max_continuation=max_continuation, defer_pads=defer_pads)


@app.command()
@handle_errors
def decode(
    text: Optional[str] = typer.Argument(None, help="One prompt to answer instead of "
                                         "--prompts: the answer goes to standard output, its "
                                         "figures to standard error."),
    model: str = ModelOption,
    prompts: Optional[Path] = typer.Option(None, "--prompts", "-p", help="JSONL of prompts "
                                           "(default: three built-in prompts on which the kept `pdiff-cpu` plans chunks, so a first "
                                           "try shows diffusion)."),
    out: Path = typer.Option(Path("runs/pdiff_decode.jsonl"), "--out", "-o",
                             help="Rows are appended here; a rerun resumes."),
    max_new_tokens: int = typer.Option(512, min=1, max=MAX_NEW_TOKENS_CAP,
                                       help="Cap on the answer: main-thread tokens plus every "
                                            "chunk's slots."),
    steps_ratio: float = StepsRatioOption,
    confidence_threshold: Optional[float] = ThresholdOption,
    length_scale: float = LengthScaleOption,
    order: str = OrderOption,
    chunk_temperature: float = ChunkTemperatureOption,
    max_continuation: int = MaxContinuationOption,
    defer_pads: bool = DeferPadsOption,
    temperature: Optional[float] = TemperatureOption,
    top_p: Optional[float] = TopPOption,
    repetition_penalty: Optional[float] = RepetitionPenaltyOption,
    seed: int = SeedOption,
    batch_size: int = typer.Option(8, min=1, help="Prompts decoded together over one KV pool "
                                   "(1: one at a time, for per-prompt wall times)."),
    pool_size: int = typer.Option(2048, min=16, help="KV slots per prompt in flight."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N prompts."),
    shard: Optional[str] = ShardOption,
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    force: bool = ForceOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Decode prompts by Planned Diffusion: the plan autoregressively (KV-cached) until
    `<sync/>`, then every planned chunk laid out in its slots and denoised in parallel (one
    forward pass per step for all chunks of all prompts in the batch), then on
    autoregressively.

    Output rows: response (tags removed, pads trimmed), annotated, forward passes (plan /
    denoise), wall time, flags, well_formed, and per chunk its slots, pads, steps and whether
    it is pad-only; the summary gives the share of well-formed answers and of pad-only
    chunks.

    Examples:

    - `pdiff decode -m pdiff-cpu "Give three tips for staying healthy."`
    - `pdiff decode -m pdiff-cpu -p ~/.cache/solm/data/alpaca_eval.jsonl --limit 30 --steps-ratio 0.5 -o runs/pdiff/decode.jsonl`
    """
    import json

    from solm.core.chat import prompt_ids
    from solm.core.errors import SolmError
    from solm.core.generation import resolve_decode
    from solm.core.jsonl import read_jsonl
    from solm.core.models import load_decoder
    from solm.core.provenance import check_rerun_settings, write_manifest
    from solm.core.records import Record, load_records
    from solm.decode.pdiff.decode_file import DEMO_PROMPTS, decode_file, result_record
    from solm.decode.pdiff.runtime import PdiffRuntime

    if text is not None and prompts is not None:
        raise SolmError("give one prompt as an argument or --prompts FILE, not both")
    decoding = resolve_decode(model, decode_flags(temperature, top_p, repetition_penalty, None))
    values = decoding.values
    cfg = decode_config(max_new_tokens, values["temperature"], values["top_p"], seed,
                        values["repetition_penalty"], steps_ratio, confidence_threshold,
                        length_scale, order, chunk_temperature, max_continuation, defer_pads)
    source = prompts or DEMO_PROMPTS
    part, device = sharded(shard, device, text_mode=text is not None)
    if part is not None:
        out = part.file(out)
    records, mixed = [], False
    row_settings = {"model": model, "max_new_tokens": max_new_tokens, "seed": seed,
                    "steps_ratio": steps_ratio, "confidence_threshold": confidence_threshold,
                    "length_scale": length_scale, "order": order,
                    "chunk_temperature": chunk_temperature, "max_continuation": max_continuation,
                    "defer_pads": defer_pads,
                    "dtype": dtype, **values}
    if text is None:
        from solm.core.paths import outputs_beside

        check_paths([source], outputs_beside(out))
        mixed = check_rerun_settings(out, row_settings, force)
        records = list(load_records(str(source), limit=limit))
        if not records:
            raise SolmError(f"{source}: no prompts; nothing was decoded")
        records = take_shard(part, records, out)
        if not records:
            return
    info(f"loading {model} ...")
    m, tok = load_decoder(model, dtype=dtype, device=device, system="pdiff")
    batch = 1 if text is not None else min(batch_size, len(records))
    rt = PdiffRuntime(m, tok, pool_size=pool_size * batch, max_batch=batch)
    if text is not None:
        res = rt.generate(prompt_ids(tok, text), cfg)
        row = result_record(rt, Record("cli", text), res, cfg)
        out_console.print(row["response"], markup=False, highlight=False, soft_wrap=True)
        console.print(figures_line(row), markup=False, highlight=False)
        return
    with progress(f"decoding (planned diffusion{f', batches of {batch}' if batch > 1 else ''})",
                  len(records)) as advance:
        summary = decode_file(rt, records, out, cfg, on_row=lambda s, row: advance())
    rows = list(read_jsonl(out))
    write_manifest(out, "pdiff decode", settings_from(locals()), inputs=[source], model=model,
                   extra={"summary": summary.to_dict()}, row_settings=row_settings,
                   mixed=mixed)
    finish_shard(part, out)
    if not quiet:
        for row in rows[-min(len(records), 2):]:
            info(f"[bold cyan]{row['id']}[/] [dim]({figures_line(row)})[/]\n{row['response']}")
    out_console.print_json(json.dumps(summary.to_dict()))


def figures_line(row: dict) -> str:
    chunks = row["chunks"]
    line = (f"{row['content_tokens']} content tokens, {len(chunks)} chunks "
            f"({row['pad_only_chunks']} pad-only), {row['forward_passes']} forward passes "
            f"({row['plan_passes']} autoregressive, {row['denoise_passes']} denoising) = "
            f"{row['forward_passes'] / max(row['content_tokens'], 1):.2f} per content token; "
            f"{row['content_tokens'] / max(row['wall_s'], 1e-9):.1f} content tokens/s")
    return line + (f"; flags: {', '.join(row['flags'])}" if row["flags"] else "")


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

