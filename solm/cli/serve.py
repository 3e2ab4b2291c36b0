"""`pasta serve` (also `solm serve`): an OpenAI-compatible server over the PASTA runtime."""

from __future__ import annotations

import os
from typing import Optional

from pathlib import Path

import typer

from solm.cli.options import settings_options, without_seed
from solm.core.sampling import SamplingConfig
from solm.decode.registry import CompiledEngine, EngineChoice
from solm.cli.setting_options import setting_option
from solm.decode.pasta.system import PastaEngine
from solm.decode.tip.system import TipEngine
from solm.cli.console import (console, handle_errors, info)
from solm.cli.flags import (loads_models, ConfigOption, DebugOption, decode_flags,
                            DeviceOption, DtypeOption, ModelOption, QuietOption)
from solm.decode.pasta.config import PastaDecodeConfig
from solm.decode.tip.config import TipDecodeConfig

API_KEY_ENV = "SOLM_API_KEY"

SERVE_HELP = f"""Serve a model over OpenAI's API: `/v1/chat/completions`, `/v1/completions`,
`/v1/models` (streaming with server-sent events), so any OpenAI client, and solm's own
`openai:` judge backend, can talk to a PASTA model.

A PASTA model's promised chunks decode as parallel threads; `content` is the answer without
tags, and an extra top-level field `solm` carries the annotated text, threads, critical
path, steps and timings (`"compare": true` in a request adds a sequential decode and the
realized speedup). Streaming sends text as it becomes final in reading order: the main
thread's prefix, and a block's text once it is finished. `logprobs` / `top_logprobs` are
given for `"mode": "sequential"` requests. Concurrent requests decode together, up to
`--max-batch` at once (continuous batching); over `--max-queue` waiting requests the server
answers 429.

Request fields beyond OpenAI's: `mode` (parallel | sequential), `repetition_penalty`,
`no_repeat_ngram`, `penalize`, `compare` (the `openai` client's `extra_body`). A request's
`temperature`, `top_p`, `seed` and `max_tokens` override the server's settings below;
omitted, the server's apply: the system's decode command's defaults (greedy for PASTA, as
`pasta decode`; temperature 0.6, top-p 0.95 and a budget of 2048 for TIP, as `tip decode`).

Binds to 127.0.0.1 unless `--host` says otherwise. With `--api-key` or ${API_KEY_ENV} set,
every `/v1` request needs `Authorization: Bearer KEY` (the key is never logged).

Examples:

- `pasta serve -m runs/pasta-sft --port 8000`
- `curl localhost:8000/v1/chat/completions -H 'Content-Type: application/json' -d '{{"model": "runs/pasta-sft", "messages": [{{"role": "user", "content": "Name three fruits."}}]}}'`
- `OpenAI(base_url="http://localhost:8000/v1", api_key="none").chat.completions.create(model="runs/pasta-sft", messages=[...], stream=True)`
"""


# options that only one system reads: given for another, they are refused, not ignored
SYSTEM_ONLY = {"tip": ("policy", "budget", "registers", "page_size"),
               "pasta": ("mode", "penalize", "max_fork_tokens", "compile",
                         "repetition_penalty", "no_repeat_ngram")}


def _refuse_other_systems_options(ctx: typer.Context, system) -> None:
    """One line naming the first option given (flag or --config) that `system` ignores."""
    from solm.cli.errors import given_explicitly

    own = set(SYSTEM_ONLY.get(system.name, ())) | set(system.sampling)
    for other, names in SYSTEM_ONLY.items():
        for name in names:
            if other != system.name and name not in own and given_explicitly(ctx, name):
                flag = "--" + name.replace("_", "-")
                raise typer.BadParameter(f"{flag} applies to --system {other} only; this "
                                         f"server is --system {system.name}",
                                         param_hint=flag)


def _registered_system(value: str) -> str:
    """Option callback: a system of the decode registry."""
    from solm.decode.registry import decode_systems

    systems = decode_systems()
    if value not in systems:
        raise typer.BadParameter(f"'{value}' is not one of {', '.join(systems)}")
    return value


@handle_errors
@settings_options(SamplingConfig, CompiledEngine, EngineChoice)
@loads_models
def serve(
    ctx: typer.Context,
    model: str = ModelOption,
    system: str = typer.Option("pasta", callback=_registered_system,
                               help="A decode system (`solm.decode.registry`): pasta: "
                                    "promised chunks decode as parallel threads; tip: the "
                                    "paged TIP runtime with an eviction policy (--policy), "
                                    "each answer reporting its live KV; pdiff, sot and any "
                                    "other registered system through its runner."),
    policy: str = setting_option(TipDecodeConfig, "policy", help_suffix=" (tip)"),
    budget: Optional[int] = setting_option(TipDecodeConfig, "budget", help_suffix=" (tip)"),
    registers: Optional[int] = setting_option(TipEngine, "registers", help_suffix=" (tip)"),
    page_size: int = setting_option(TipEngine, "page_size", help_suffix=" (tip)"),
    host: str = typer.Option("127.0.0.1", help="Address to bind (0.0.0.0: every interface; "
                             "set an API key then)."),
    port: int = typer.Option(8000, min=1, max=65535, help="TCP port."),
    served_model_name: Optional[str] = typer.Option(None, help="The name `/v1/models` lists "
                                                     "and requests give (default: --model)."),
    api_key: Optional[str] = typer.Option(None, help=f"Require this bearer key (default: "
                                          f"${API_KEY_ENV} when set; none otherwise).",
                                          show_default=False),
    mode: str = setting_option(PastaDecodeConfig, "mode", help_suffix=" The default; a "
                               "request's `mode` overrides it."),
    max_new_tokens: int = setting_option(PastaDecodeConfig, "max_new_tokens",
                                         help_suffix=" The default and upper bound of a "
                                                     "request's max_tokens (over it: 400)."),
    penalize: str = setting_option(PastaDecodeConfig, "penalize"),
    pool_size: int = setting_option(PastaEngine, "pool_size", 4096,
                                    why="a prompt and its whole answer must fit (a longer "
                                        "prompt: 400 context_length_exceeded)"),
    max_fork_tokens: int = setting_option(PastaDecodeConfig, "max_fork_tokens"),
    max_queue: int = typer.Option(32, min=1, help="Requests that may wait; more get 429."),
    max_batch: int = typer.Option(8, min=1, help="Requests decoded together (continuous "
                                  "batching over one pool of max-batch x --pool-size "
                                  "slots); 1 decodes one request at a time."),
    max_request_bytes: int = typer.Option(1 << 20, min=1024, help="Largest request body "
                                          "(over it: 413)."),
    shutdown_timeout: float = typer.Option(30.0, min=0.0, help="On SIGTERM or Ctrl-C: "
                                           "seconds in-flight requests get to finish before "
                                           "they are cancelled with an error (new ones get "
                                           "503 meanwhile; a second signal cancels at once)."),
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
    **options,
) -> None:
    from solm.serve.app import ServeSettings, create_app

    from solm.core.generation import resolve_decode

    from solm.decode.registry import decode_system
    from solm.serve.systems import check_engine, make_engine

    chosen = decode_system(system)
    _refuse_other_systems_options(ctx, chosen)
    key = api_key or os.environ.get(API_KEY_ENV) or None
    decoding = resolve_decode(model, decode_flags(**without_seed(options)),
                              chosen.command_defaults)
    if budget is None:
        budget = chosen.command_defaults.get("budget")
    name = served_model_name or model
    opts = dict(mode=mode, max_new_tokens=max_new_tokens, penalize=penalize, seed=options["seed"],
                pool_size=pool_size, max_fork_tokens=max_fork_tokens, max_queue=max_queue,
                max_batch=max_batch, compile=options["compile"],
                quantize=options["quantize"], policy=policy,
                budget=budget, registers=registers, page_size=page_size,
                engine=options["engine"], gguf_type=options["gguf_type"],
                onnx_type=options["onnx_type"])
    check_engine(chosen, model, opts, decoding)  # a refusal before anything loads
    info(f"loading {model} ...")
    engine, defaults, what = make_engine(chosen, model, opts, decoding, dtype, device)
    s = defaults.sampling
    info(f"request defaults: temperature {s.temperature:g}, top-p {s.top_p:g}, repetition "
         f"penalty {s.repetition_penalty:g}, no-repeat n-gram {s.no_repeat_ngram}")
    app = create_app(engine, ServeSettings(model_name=name, defaults=defaults, api_key=key,
                                           max_request_bytes=max_request_bytes))
    _run(app, engine, host, port, quiet, key, name, what, shutdown_timeout)


def _run(app, engine, host: str, port: int, quiet: bool, key: str | None, name: str,
         what: str, shutdown_timeout: float) -> None:
    import uvicorn

    if key is None and host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]warning:[/] serving on {host} without an API key")
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, access_log=not quiet,
                                           log_level="warning" if quiet else "info",
                                           timeout_graceful_shutdown=10))
    run_until_stopped(server, engine, f"serving '{name}' at http://{host}:{port}/v1 "
                                      f"({'bearer key required' if key else 'no key'}; "
                                      f"{what})", shutdown_timeout)


def run_until_stopped(server, engine, banner: str, shutdown_timeout: float = 30.0) -> None:
    """HTTP on a side thread, decoding in this one (the thread that loaded the model; see
    solm.serve.engine), until Ctrl-C or SIGTERM. The first signal stops new requests (503)
    and gives the queued and running ones `shutdown_timeout` seconds to finish; then they
    are cancelled with an error (streams get an error event before they close). A second
    signal cancels at once."""
    import signal
    import threading
    import time

    from solm.core.errors import SolmError

    http = threading.Thread(target=server.run, name="solm-http", daemon=True)
    http.start()
    while not server.started:
        if not http.is_alive():
            raise SolmError(f"could not listen on {server.config.host}:{server.config.port} "
                            f"(in use? see the message above)")
        time.sleep(0.05)
    console.print(banner, highlight=False)

    def stop(signum, _frame):
        if engine.draining.is_set():
            engine.abort.set()
            return
        console.print(f"stopping: no new requests; in-flight ones have {shutdown_timeout:g} s "
                      f"to finish", highlight=False)
        engine.shutdown(shutdown_timeout)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        engine.work(keep_going=http.is_alive)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.should_exit = True  # uvicorn lets the answered responses finish sending
        http.join(timeout=shutdown_timeout + 10)
