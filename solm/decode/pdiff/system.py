"""Planned Diffusion as a decode system: plan, denoise the chunks in parallel, continue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from solm.core.settings import setting
from solm.decode.pdiff.config import PdiffDecodeConfig
from solm.decode.pdiff.decode_file import DEMO_PROMPTS, PdiffDecodeSummary
from solm.decode.registry import (DecodeSystem, Display, EngineChoice, EvalKinds,
                                  register_system)
from solm.engines import choose, engine_note, get_engine, load_on_engine


@dataclass
class PdiffEngine(EngineChoice):
    batch_size: int = setting(8, "Prompts decoded together over one KV pool (1: one at a "
                                 "time, for per-prompt wall times).", min=1)
    pool_size: int = setting(2048, "KV slots per prompt in flight.", min=16)
    compile: Optional[bool] = setting(None, "Compile the plan's passes (torch engine; "
                                            "default: on CUDA only, where launches dominate).",
                                      flags=("--compile/--no-compile",))


def prepare(config: PdiffDecodeConfig, engine: PdiffEngine, model: str) -> None:
    engine.engine = choose(engine.engine, "pdiff", config=config, settings=engine, model=model)


def load(model: str, engine: PdiffEngine, dtype: str, device: str | None):
    return load_on_engine(model, engine, dtype, device, "pdiff")


def runner(model, tokenizer, config: PdiffDecodeConfig, engine: PdiffEngine, prompts: int,
           single: bool):
    from solm.decode.pdiff.decode_file import PdiffRunner
    from solm.decode.pdiff.runtime import PdiffRuntime
    from solm.engines.torch.compiled import should_compile

    batch = 1 if single else max(1, min(engine.batch_size, prompts))
    forward = get_engine(engine.engine).step("pdiff", engine, engine.pool_size * batch)
    compiled = forward is None and should_compile(engine.compile, 0,
                                                  next(model.parameters()).device)
    out = PdiffRunner(PdiffRuntime(model, tokenizer, pool_size=engine.pool_size * batch,
                                   max_batch=batch, forward=forward, compile=compiled), config)
    out.engine = engine.engine
    return out


def figures_line(row: dict) -> str:
    chunks = row["chunks"]
    line = (f"{row['content_tokens']} content tokens, {len(chunks)} chunks "
            f"({row['pad_only_chunks']} pad-only), {row['forward_passes']} forward passes "
            f"({row['plan_passes']} autoregressive, {row['denoise_passes']} denoising, "
            f"{row.get('join_passes', 0)} joining) = "
            f"{row['forward_passes'] / max(row['content_tokens'], 1):.2f} per content token; "
            f"{row['content_tokens'] / max(row['wall_s'], 1e-9):.1f} content tokens/s")
    return line + (f"; flags: {', '.join(row['flags'])}" if row["flags"] else "")


def describe(runner) -> str:
    batch = runner.rt.max_batch
    return (f"decoding (planned diffusion{f', batches of {batch}' if batch > 1 else ''}"
            f"{engine_note(runner.engine)})")


def eval_row(row: dict) -> dict:
    """Every forward pass is a step of the critical path (a denoising pass fills many
    slots at once); the chunk health rides along."""
    return {"output": row["response"], "annotated": row["annotated"],
            "content_tokens": row["content_tokens"], "critical_path": row["forward_passes"],
            "forward_passes": row["forward_passes"], "promises": row["promises"],
            "threads": row["promises"], "generated_tokens": row["total_tokens"],
            "total_tokens": row["total_tokens"], "wall_s": row["wall_s"],
            "prefill_s": row["prefill_s"], "decode_s": row["decode_s"], "flags": row["flags"],
            **{k: row[k] for k in ("plan_passes", "denoise_passes", "chunks",
                                   "pad_only_chunks", "chunk_repeated_ngrams",
                                   "well_formed")},
            **{k: row[k] for k in ("join_passes", "degenerate_chunks", "denoise_fed_slots",
                                   "denoise_committed") if k in row}}


SYSTEM = register_system(DecodeSystem(
    name="pdiff", help="Planned Diffusion: a plan of promises, chunks denoised in parallel.",
    config_cls=PdiffDecodeConfig, engine_cls=PdiffEngine, load=load, runner=runner,
    summary_cls=PdiffDecodeSummary, demo_prompts=DEMO_PROMPTS,
    default_out="runs/pdiff_decode.jsonl", prepare=prepare,
    row_engine_settings=("engine", "gguf_type"),
    display=Display(describe=describe, shown_rows=2, row_figures=figures_line),
    evaluation=EvalKinds(methods={"pdiff": {}}, eval_row=eval_row)))
