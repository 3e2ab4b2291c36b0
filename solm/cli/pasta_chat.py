"""`pasta chat`: talk to a model; a PASTA model's threads drawn live as they fork and join."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Group

from solm.cli.console import console, handle_errors, info, out_console
from solm.cli.flags import (loads_models, ConfigOption, DebugOption, decode_flags,
                            DeviceOption, DtypeOption, ModelOption, QuietOption)
from solm.cli.options import settings_options, without_seed
from solm.cli.setting_options import setting_option
from solm.decode.pasta.system import PastaEngine
from solm.core.generation import resolve_decode
from solm.core.sampling import SamplingConfig
from solm.decode.pasta.config import PastaDecodeConfig
from solm.decode.registry import CompiledEngine, EngineChoice


def render_threads(views) -> Group:
    """A panel per thread: main, then each block titled by its topic (yellow while it is
    written, green once joined-ready)."""
    from rich.panel import Panel
    from rich.text import Text

    panels = []
    for v in views:
        title = "main" if v.tid == 0 else f"block {v.tid}: {v.topic.strip() or '?'}"
        style = "green" if v.done else "yellow"
        panels.append(Panel(Text(v.text or "…"), title=title, title_align="left",
                            border_style=style))
    return Group(*panels)


@handle_errors
@settings_options(SamplingConfig, CompiledEngine, EngineChoice)
@loads_models
def chat(
    model: str = ModelOption,
    system: Optional[str] = typer.Option(None, help="A system message for the conversation."),
    max_new_tokens: int = setting_option(PastaDecodeConfig, "max_new_tokens"),
    pool_size: int = setting_option(PastaEngine, "pool_size", 4096,
                                    why="a whole conversation shares one pool"),
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
    **options,
) -> None:
    """Talk to a model. A PASTA model's threads are shown live as they fork and join, and
    each answer ends with its threads, steps and speedup over sequential decoding. An empty
    line or Ctrl-D ends the chat. On `--engine llama.cpp` the model must be laid out
    overlap (`pasta sft --positions overlap`), as the kept pasta-sft-overlap-cpu is."""
    from rich.live import Live

    from solm.core.chat import messages_ids
    from solm.core.records import Record
    from solm.decode.pasta.decode_file import result_record
    from solm.decode.pasta.live import thread_views
    from solm.decode.pasta.runtime import PastaDecodeConfig
    from solm.decode.pasta.system import runtime_on_engine

    decoding = resolve_decode(model, decode_flags(**without_seed(options)))
    info(f"loading {model} ...")
    rt, settings = runtime_on_engine(model, "parallel", options["engine"], options["gguf_type"],
                                     dtype, device, pool_size, compile=options["compile"],
                                     quantize=options["quantize"],
                                     expected_tokens=min(max_new_tokens, pool_size))
    from solm.engines import get_engine

    tok, chosen = rt.tokenizer, get_engine(settings.engine)
    on = chosen.describe(settings, str(rt.model.dtype))
    info(f"decoding on {on} with {decoding.describe()}")
    cfg = PastaDecodeConfig(max_new_tokens=max_new_tokens, sampling=SamplingConfig(
        seed=options["seed"], **decoding.values))
    messages = [{"role": "system", "content": system}] if system else []
    while True:
        try:
            text = console.input("[bold cyan]you>[/] ")
        except EOFError:
            break
        if not text.strip():
            break
        messages.append({"role": "user", "content": text})
        state = rt.prefill(messages_ids(tok, messages), cfg, rt.chooser(cfg))
        with Live(render_threads(thread_views(rt, state)), console=console,
                  transient=True, refresh_per_second=8) as live:
            while rt.step(state):
                live.update(render_threads(thread_views(rt, state)))
        res = rt.finish(state)
        row = result_record(rt, Record("chat", text), res, cfg.mode)
        out_console.print(f"[bold green]model>[/] {row['response']}", highlight=False)
        from solm.decode.pasta.system import figures_line

        # solm counts the bytes of its own torch steps only
        figures = (figures_line(row, res, rt.model) if chosen.torch_step
                   else figures_line(row, res) + f" ({settings.engine})")
        console.print(f"[dim]{figures}[/]", highlight=False)
        messages.append({"role": "assistant", "content": row["response"]})
