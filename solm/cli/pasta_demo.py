"""`pasta demo`: a kept PASTA model decodes one answer in parallel threads, drawn live, then
the same answer one token a pass, with the realized speedup measured in the same run."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from solm.cli.checks import check_paths
from solm.cli.console import console, out_console
from solm.cli.flags import (ConfigOption, DebugOption, DeviceOption, DtypeOption, QuietOption,
                            decode_flags, engine_option, gguf_type_option, model_command,
                            model_option, out_option)
from solm.cli.pasta_chat import render_threads
from solm.cli.setting_options import setting_option
from solm.core.generation import resolve_decode
from solm.decode.pasta.config import PastaDecodeConfig
from solm.decode.registry import EngineChoice


@model_command
def demo(
    model: str = model_option("pasta-bonbon-cpu", help="A PASTA model: alias, "
                              "HF folder or hub id (default: the kept model trained on the "
                              "embedded model's own answers, after its BoNBoN rounds; "
                              "pasta-sft-overlap-cpu is the one llama.cpp decodes too)."),
    prompt: Optional[str] = typer.Option(None, help="The prompt (default: one the kept "
                                         "pasta-bonbon-cpu model answers in three "
                                         "threads)."),
    max_new_tokens: int = setting_option(PastaDecodeConfig, "max_new_tokens", 512,
                                         why="the kept model ends its answer to the demo "
                                         "prompt by itself, at 286 tokens"),
    width: int = typer.Option(60, min=10, max=400, help="Columns of the thread timeline."),
    repeats: int = typer.Option(5, min=1, max=50, help="Timed decodes of each side (after a "
                                "warm-up of both), in alternating order; the fastest of "
                                "each side are compared (on a fresh machine every side's "
                                "first timed runs were up to 1.4x slower than its last)."),
    fastest: bool = typer.Option(True, "--fastest/--no-fastest", help="Also time the "
                                 "fastest sequential decoding on this machine: llama.cpp's "
                                 "own one-token loop on its fastest one-token GGUF (where "
                                 "llama-cpp-python is installed), as many tokens as the "
                                 "answer's content, from the same prompt."),
    out: Optional[Path] = out_option(None, help="Also write the figures "
                                       "and the answer as JSON here."),
    engine: str = engine_option("auto", why="the engine measured fastest here"),
    gguf_type: str = gguf_type_option(),
    onnx_type: str = setting_option(EngineChoice, "onnx_type"),
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Watch a trained PASTA model decode in parallel: it writes its own promises, the
    runtime forks a thread per promise (drawn live as they fork and join, then as a
    timeline, one column per decode step), and the same answer is then decoded one token per
    step by the same model, so the realized speedup printed is measured in this run, on the
    same text (prefill excluded from both). `make demo` runs this on the embedded model's
    kept PASTA model (about a minute on a 2-core CPU: the timing replays each side four
    times)."""
    import json as _json

    from rich.live import Live
    from rich.text import Text

    from solm.core.sampling import SamplingConfig
    from solm.engines.bandwidth import cpu_description
    from solm.core.systems.pasta_schedule import schedule_steps
    from solm.decode.pasta.demo import DEMO_PROMPT, run_demo, timeline_rows
    from solm.decode.pasta.runtime import PastaDecodeConfig
    from solm.decode.pasta.system import runtime_on_engine, sequential_yardstick
    from solm.engines import applies, get_engine

    if out is not None:
        check_paths([], [out])
    prompt = prompt or DEMO_PROMPT
    decoding = resolve_decode(model, decode_flags(None, None, None, None))
    rt, settings = runtime_on_engine(model, "parallel", engine, gguf_type, dtype, device,
                                     max(1024, 4 * max_new_tokens), onnx_type=onnx_type)
    m = rt.model
    where = cpu_description() if m.device.type == "cpu" else str(m.device)
    on = get_engine(settings.engine).describe(settings, str(m.dtype))
    console.print(f"[bold]{model}[/] on {where}, engine {on}; decoding with "
                  f"{decoding.describe()}", highlight=False)
    console.print(f"[bold cyan]prompt>[/] {prompt}", highlight=False)
    cfg = PastaDecodeConfig(max_new_tokens=max_new_tokens,
                            sampling=SamplingConfig(**decoding.values))
    yardstick = sequential_yardstick(model, max(1024, 4 * max_new_tokens)) if fastest else None
    try:
        with Live(console=console, transient=True, refresh_per_second=10) as live:
            res = run_demo(rt, prompt, cfg, on_views=lambda v: live.update(render_threads(v)),
                           repeats=repeats, yardstick=yardstick[:2] if yardstick else None)
    finally:
        if yardstick:
            yardstick[2]()
    from solm.engines.cost import record_tokens_per_pass

    # what `--engine auto` weighs next time: this model's tokens per pass, measured here
    record_tokens_per_pass(model, "pasta", cfg, [{"content_tokens": len(res.content_ids),
                                                  "tokens_fed": res.decoded.tokens_fed,
                                                  "forward_passes": res.decoded.forward_passes}])
    console.print(render_threads(res.views), soft_wrap=False)
    live_run = res.decoded
    if "max_new_tokens" in live_run.flags:
        console.print(f"[yellow]The answer below is cut: the cap of {max_new_tokens} new "
                      f"tokens (--max-new-tokens) ended it before the model did.[/]",
                      highlight=False)
    out_console.print(f"[bold green]model>[/] {res.response}", highlight=False)
    steps = len(res.timeline.steps)
    console.print(f"\n[bold]threads over the {steps} decode steps[/] (█ decoding a token, "
                  "· forked and waiting):", highlight=False)
    rows = timeline_rows(res.timeline, width)
    pad = max(len(n) for n, _ in rows) + 2
    for name, bar in rows:
        console.print(Text(name.ljust(pad)) + Text(bar, style="green" if name != "main"
                                                   else "cyan"))
    par, seq = res.parallel, res.sequential
    n = len(res.content_ids)
    par_critical = schedule_steps(res.decoded.ids, rt.vocab)
    lines = [
        f"parallel: {n} answer tokens in {live_run.forward_passes} forward passes (its "
        f"critical path: {schedule_steps(live_run.ids, rt.vocab, unfed=live_run.unfed)}), "
        f"{live_run.threads} threads forked",
        f"timed (both warmed, {repeats} runs each in alternating order, fastest): parallel "
        f"{par.forward_passes} passes {par.decode_s:.2f} s; sequential (the same answer, same "
        f"model, one token per pass) {seq.forward_passes} passes {seq.decode_s:.2f} s",
        f"timed replays: parallel {_span(res.times['parallel'])}, sequential "
        f"{_span(res.times['sequential'])} (slowest / fastest: "
        f"{res.spread['parallel']:.2f}, {res.spread['sequential']:.2f})",
        f"realized speedup against the same engine: {res.realized_speedup:.2f}x (its "
        f"sequential decode / the parallel one, measured now); theoretical "
        f"{res.theoretical_speedup:.2f}x (content tokens / the {par_critical} passes of the "
        f"timed parallel replay, which feeds every token of the answer: the realized speedup "
        f"if every pass cost the same)",
        f"per forward pass: parallel {1000 * par.decode_s / max(par.forward_passes, 1):.0f} ms "
        f"({par.tokens_fed / max(par.forward_passes, 1):.2f} tokens a pass), sequential "
        f"{1000 * seq.decode_s / max(seq.forward_passes, 1):.0f} ms (1 token a pass)",
    ]
    if res.realized_vs_fastest is not None:
        lines.append(f"realized speedup against the fastest sequential decoding here "
                     f"({res.yardstick}): {res.realized_vs_fastest:.2f}x ({n} tokens in "
                     f"{res.fastest_sequential_s:.2f} s, "
                     f"{1000 * res.fastest_sequential_s / max(n, 1):.1f} ms a token)")
    if live_run.flags:
        lines.append(f"flags: {', '.join(live_run.flags)} (the cap of {max_new_tokens} tokens "
                     "cut the answer)" if "max_new_tokens" in live_run.flags else
                     f"flags: {', '.join(live_run.flags)}")
    for line in lines:
        console.print(line, highlight=False)
    for line in res.warnings():
        console.print(f"[yellow]warning:[/] {line}", highlight=False)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(_json.dumps({
            "model": model, "prompt": prompt, "response": res.response, "machine": where,
            "engine": settings.engine, "gguf_type": settings.gguf_type if
            applies(settings.engine, "gguf_type") else None,
            "onnx_type": settings.onnx_type if applies(settings.engine, "onnx_type") else None,
            "dtype": str(m.dtype) if applies(settings.engine, "dtype") else None,
            "answer_tokens": n, "threads": live_run.threads,
            "decode_forward_passes": live_run.forward_passes,
            "decode_tokens_fed": live_run.tokens_fed,
            "critical_path": par_critical,
            "parallel_forward_passes": par.forward_passes, "parallel_decode_s": par.decode_s,
            "parallel_tokens_fed": par.tokens_fed, "repeats": repeats, "times_s": res.times,
            "sequential_forward_passes": seq.forward_passes,
            "sequential_decode_s": seq.decode_s, "realized_speedup": res.realized_speedup,
            "fastest_sequential": res.yardstick or None,
            "fastest_sequential_s": res.fastest_sequential_s,
            "realized_vs_fastest": res.realized_vs_fastest,
            "theoretical_speedup": res.theoretical_speedup, "distrusted": res.distrusted,
            "spread": res.spread, "unreliable": res.unreliable,
            "warnings": res.warnings(),
            "flags": live_run.flags,
            "timeline": rows}, indent=1) + "\n")


def _span(times: list[float]) -> str:
    return f"{min(times):.2f}-{max(times):.2f} s" if times else "not timed"
