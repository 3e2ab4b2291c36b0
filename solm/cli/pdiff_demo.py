"""`pdiff demo`: a kept Planned Diffusion model answers one prompt (its plan, then its chunks
denoised in parallel), and its content tokens per second are measured against the baseline's
sequential decoding on the fastest sequential engine here, side by side in the same run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.cli.checks import check_paths
from solm.cli.console import console, out_console
from solm.cli.flags import (ConfigOption, DebugOption, DeviceOption, DtypeOption, QuietOption,
                            decode_flags, engine_option, gguf_type_option, model_command,
                            model_option, out_option)
from solm.cli.setting_options import setting_option
from solm.decode.pdiff.config import PdiffDecodeConfig

DEMO_HELP = """Watch a kept Planned Diffusion model answer: it writes a plan of promises
autoregressively, every planned chunk is denoised in parallel (a pass feeds all of them), then
it continues. The answer is shown with each chunk marked, with its passes (autoregressive and
denoising) per content token; then the same prompt's answer length is decoded one token a pass
by the baseline on the fastest sequential decoding here (llama.cpp's own C loop, its fastest
one-token GGUF), both warmed and timed in alternating order, and the realized speedup in
content tokens per second is printed (prefill excluded from both). `make pdiff-demo` runs
it on the kept models."""


@model_command
def demo(
    model: str = model_option("pdiff-overlap-cpu", help="A Planned Diffusion model (default: "
                              "the kept one laid out for llama.cpp)."),
    baseline: str = typer.Option("baseline-sft-cpu", help="The autoregressive model it is "
                                 "timed against (default: the kept Baseline-SFT, trained on "
                                 "the same rows)."),
    prompt: Optional[str] = typer.Option(None, help="The prompt (default: the first built-in "
                                         "prompt of `pdiff decode`)."),
    max_new_tokens: int = setting_option(PdiffDecodeConfig, "max_new_tokens", 384,
                                         why="the evaluations' cap"),
    steps_ratio: float = setting_option(PdiffDecodeConfig, "steps_ratio"),
    confidence_threshold: Optional[float] = setting_option(PdiffDecodeConfig,
                                                           "confidence_threshold"),
    repeats: int = typer.Option(3, min=1, max=50, help="Timed decodes of each side (after a "
                                "warm-up of both), alternating which goes first; the fastest "
                                "of each side are compared."),
    out: Optional[Path] = out_option(None, help="Also write the figures and the answer as "
                                     "JSON here."),
    engine: str = engine_option("auto", why="the engine measured fastest here"),
    gguf_type: str = gguf_type_option(),
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from rich.text import Text

    from solm.core.chat import prompt_ids
    from solm.core.errors import SolmError
    from solm.core.generation import resolve_decode
    from solm.core.records import Record
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.system import sequential_yardstick
    from solm.decode.pdiff.decode_file import DEMO_PROMPTS, result_record
    from solm.decode.pdiff.demo import time_side_by_side
    from solm.decode.pdiff.system import PdiffEngine, load, prepare, runner
    from solm.engines import get_engine
    from solm.engines.bandwidth import cpu_description

    if out is not None:
        check_paths([], [out])
    if prompt is None:
        prompt = json.loads(DEMO_PROMPTS.read_text().splitlines()[0])["prompt"]
    decoding = resolve_decode(model, decode_flags(None, None, None, None))
    cfg = PdiffDecodeConfig(max_new_tokens=max_new_tokens, steps_ratio=steps_ratio,
                            confidence_threshold=confidence_threshold,
                            sampling=SamplingConfig(**decoding.values))
    cfg.check()
    cells = max(2048, 4 * max_new_tokens)
    settings = PdiffEngine(engine=engine, gguf_type=gguf_type, batch_size=1, pool_size=cells)
    prepare(cfg, settings, model)
    m, tok = load(model, settings, dtype, device)
    run = runner(m, tok, cfg, settings, 1, True)
    where = cpu_description() if m.device.type == "cpu" else str(m.device)
    on = get_engine(settings.engine).describe(settings, str(m.dtype))
    console.print(f"[bold]{model}[/] on {where}, engine {on}; decoding with "
                  f"{decoding.describe()}, steps ratio {cfg.steps_ratio}, confidence "
                  f"threshold {cfg.confidence_threshold or 'off'}", highlight=False)
    console.print(f"[bold cyan]prompt>[/] {prompt}", highlight=False)
    ids = prompt_ids(tok, prompt)
    res = run.rt.generate(ids, cfg)  # the shown answer, and the warm-up of this side
    row = result_record(run.rt, Record("demo", prompt), res, cfg)
    shown = Text()
    for piece, in_chunk in chunk_pieces(row["annotated"]):
        shown.append(piece, style="bold green" if in_chunk else "")
    out_console.print(Text("model> ", style="bold green") + shown)
    n = row["content_tokens"]
    if not res.chunks:
        console.print("[yellow]The model planned no chunk for this prompt: the timing below is "
                      "of an autoregressive answer.[/]", highlight=False)
    yardstick = sequential_yardstick(baseline, cells)
    if yardstick is None:
        raise SolmError(f"no sequential yardstick for {baseline}: llama.cpp could not load it "
                        "(see the notice above)")
    name, decode_n, close = yardstick
    try:  # the baseline reads the same prompt ids (control tokens sit past its vocabulary)
        # n + 1 tokens: the first comes from the prefill, so n one-token passes are timed
        decode_n(ids, n + 1)  # the sequential side's warm-up
        timing = time_side_by_side(lambda: run.rt.generate(ids, cfg).decode_s,
                                   lambda: decode_n(ids, n + 1), n, repeats)
    finally:
        close()
    lines = [
        f"{n} content tokens, {len(res.chunks)} chunks, {res.forward_passes} forward passes "
        f"({res.plan_passes} autoregressive, {res.denoise_passes} denoising, "
        f"{res.join_passes} joining): "
        f"{res.forward_passes / max(n, 1):.2f} passes per content token"
        + (f"; flags: {', '.join(res.flags)}" if res.flags else ""),
        f"timed (both warmed, {repeats} runs each in alternating order, fastest): Planned "
        f"Diffusion {min(timing.pdiff_s):.2f} s = {timing.pdiff_tokens_per_s:.1f} content "
        f"tokens/s; {baseline} on {name}: {n} tokens in {min(timing.sequential_s):.2f} s = "
        f"{timing.sequential_tokens_per_s:.1f} tokens/s",
        f"realized speedup against the fastest sequential decoding here: "
        f"{timing.realized:.2f}x (content tokens per second, prefill excluded from both)",
    ]
    for line in lines:
        console.print(line, highlight=False)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "model": model, "baseline": baseline, "prompt": prompt, "machine": where,
            "engine": settings.engine, **weight_format(settings, m), "sequential": name,
            "steps_ratio": cfg.steps_ratio, "confidence_threshold": cfg.confidence_threshold,
            "response": row["response"], "annotated": row["annotated"],
            "forward_passes": res.forward_passes, "plan_passes": res.plan_passes,
            "denoise_passes": res.denoise_passes, "join_passes": res.join_passes,
            "denoise_fed_slots": res.fed_slots, "denoise_committed": res.committed,
            "chunks": row["chunks"],
            "flags": res.flags, "repeats": repeats, **timing.to_dict()}, indent=1) + "\n")


def weight_format(settings, model) -> dict:
    """What the decode's weights were: torch's dtype on torch, the GGUF type on llama.cpp,
    the ONNX weight type on onnxruntime (a llama.cpp run records no torch dtype)."""
    from solm.engines import applies

    return {"dtype": str(model.dtype) if applies(settings.engine, "dtype") else None,
            "gguf_type": settings.gguf_type if applies(settings.engine, "gguf_type") else None,
            "onnx_type": settings.onnx_type if applies(settings.engine, "onnx_type") else None}


def chunk_pieces(annotated: str) -> list[tuple[str, bool]]:
    """The annotated answer cut at its chunk tags: (text, inside a chunk) in order, the tags
    kept with the text they open or close, so the pieces join back to the answer."""
    out: list[tuple[str, bool]] = []
    rest, inside = annotated, False
    while rest:
        tag = "</async>" if inside else "<async>"
        at = rest.find(tag)
        if at < 0:
            out.append((rest, inside))
            break
        cut = at + len(tag) if inside else at
        if cut:
            out.append((rest[:cut], inside))
        rest, inside = rest[cut:], not inside
    return [(t, c) for t, c in out if t]
