"""`pasta serve` (also `solm serve`): an OpenAI-compatible server over the PASTA runtime."""

from __future__ import annotations

import os
from typing import Optional

from pathlib import Path

import typer

from solm.cli.checks import one_of
from solm.cli.setting_options import setting_option
from solm.cli.console import (console, handle_errors, info)
from solm.cli.flags import (CompileOption, ConfigOption, DebugOption, decode_flags, DeviceOption,
                            DtypeOption, ModelOption, NoRepeatNgramOption, QuantizeOption,
                            QuietOption, RepetitionPenaltyOption, SeedOption, TemperatureOption,
                            TopPOption)
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
omitted, the server's apply (greedy by default, as `pasta decode`).

Binds to 127.0.0.1 unless `--host` says otherwise. With `--api-key` or ${API_KEY_ENV} set,
every `/v1` request needs `Authorization: Bearer KEY` (the key is never logged).

Examples:

- `pasta serve -m runs/pasta-sft --port 8000`
- `curl localhost:8000/v1/chat/completions -H 'Content-Type: application/json' -d '{{"model": "runs/pasta-sft", "messages": [{{"role": "user", "content": "Name three fruits."}}]}}'`
- `OpenAI(base_url="http://localhost:8000/v1", api_key="none").chat.completions.create(model="runs/pasta-sft", messages=[...], stream=True)`
"""


# options that only one --system reads: given for the other, they are refused, not ignored
TIP_ONLY = ("policy", "budget", "registers", "page_size")
PASTA_ONLY = ("mode", "penalize", "max_fork_tokens", "compile", "repetition_penalty",
              "no_repeat_ngram")


def _refuse_other_systems_options(ctx: typer.Context, system: str) -> None:
    """One line naming the first option given (flag or --config) that `system` ignores."""
    from solm.cli.errors import given_explicitly

    others = PASTA_ONLY if system == "tip" else TIP_ONLY
    for name in others:
        if given_explicitly(ctx, name):
            flag = "--" + name.replace("_", "-")
            raise typer.BadParameter(f"{flag} applies to --system "
                                     f"{'pasta' if system == 'tip' else 'tip'} only; this "
                                     f"server is --system {system}", param_hint=flag)


@handle_errors
def serve(
    ctx: typer.Context,
    model: str = ModelOption,
    system: str = typer.Option("pasta", callback=one_of("pasta", "tip"),
                               help="pasta: promised chunks decode as parallel threads; tip: "
                                    "the paged TIP runtime with an eviction policy "
                                    "(--policy), each answer reporting its live KV."),
    policy: str = setting_option(TipDecodeConfig, "policy", help_suffix=" (tip)"),
    budget: Optional[int] = setting_option(TipDecodeConfig, "budget", help_suffix=" (tip)"),
    registers: Optional[int] = typer.Option(None, min=1, help="tip: thought registers "
                                            "(default: the model's solm.json, else 16)."),
    page_size: int = typer.Option(64, min=1, help="tip: tokens per KV page."),
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
    max_new_tokens: int = setting_option(PastaDecodeConfig, "max_new_tokens", 512,
                                         help_suffix=" The default and upper bound of a "
                                                     "request's max_tokens (over it: 400)."),
    temperature: Optional[float] = TemperatureOption,
    top_p: Optional[float] = TopPOption,
    repetition_penalty: Optional[float] = RepetitionPenaltyOption,
    no_repeat_ngram: Optional[int] = NoRepeatNgramOption,
    penalize: str = setting_option(PastaDecodeConfig, "penalize"),
    seed: int = SeedOption,
    pool_size: int = typer.Option(4096, min=2, help="KV pool slots: prompt + answer must fit "
                                  "(a longer prompt: 400 context_length_exceeded)."),
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
    compile: Optional[bool] = CompileOption,
    quantize: Optional[str] = QuantizeOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.core.models import load_decoder
    from solm.core.sampling import SamplingConfig
    from solm.decode.compiled import should_compile
    from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime
    from solm.serve.app import ServeSettings, create_app
    from solm.serve.engine import ServeEngine

    from solm.core.generation import resolve_decode

    _refuse_other_systems_options(ctx, system)
    key = api_key or os.environ.get(API_KEY_ENV) or None
    decoding = resolve_decode(model, decode_flags(temperature, top_p, repetition_penalty,
                                                  no_repeat_ngram))
    name = served_model_name or model
    if system == "tip":
        engine, defaults = _tip_engine(model, policy, budget, registers, page_size, pool_size,
                                       max_batch, max_queue, max_new_tokens, seed, decoding,
                                       dtype, device, quantize)
        app = create_app(engine, ServeSettings(model_name=name, defaults=defaults, api_key=key,
                                               max_request_bytes=max_request_bytes))
        _run(app, engine, host, port, quiet, key, name,
             f"tip runtime, policy {policy}", shutdown_timeout)
        return
    info(f"loading {model} ...")
    m, tok = load_decoder(model, dtype=dtype, device=device, quantize=quantize)
    info(f"request defaults: {decoding.describe()}")
    # a CPU server compiles only when asked: each new shape bucket would stall a request
    rt = PastaRuntime(m, tok, pool_size=pool_size,
                      compile=should_compile(compile, 0, m.device))
    rt.grammar  # built once now, not inside the first request
    defaults = PastaDecodeConfig(
        mode=mode, max_new_tokens=max_new_tokens, max_fork_tokens=max_fork_tokens,
        penalize=penalize, sampling=SamplingConfig(seed=seed, **decoding.values))
    engine = ServeEngine(rt, max_queue=max_queue, max_batch=max_batch)
    app = create_app(engine, ServeSettings(model_name=name, defaults=defaults, api_key=key,
                                           max_request_bytes=max_request_bytes))
    _run(app, engine, host, port, quiet, key, name, f"{mode} by default", shutdown_timeout)


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


def _tip_engine(model: str, policy: str, budget: int | None, registers: int | None,
                page_size: int, pool_size: int, max_batch: int, max_queue: int,
                max_new_tokens: int, seed: int, decoding, dtype: str, device: str | None,
                quantize: str | None):
    """A TIP model on the paged runtime: `pool_size` tokens per batch row."""
    from solm.core.errors import SolmError
    from solm.core.models import load_decoder, model_registers
    from solm.core.sampling import SamplingConfig
    from solm.decode.tip.policies import make_policy
    from solm.decode.tip.runtime import TipDecodeConfig, TipRuntime
    from solm.serve.tip_engine import TipServeEngine

    make_policy(policy, budget, page_size)  # bad flags fail before the model loads
    values = decoding.values
    if values.get("repetition_penalty", 1.0) != 1.0 or values.get("no_repeat_ngram"):
        raise SolmError("the TIP runtime applies no repetition penalty or n-gram ban; drop "
                        "--repetition-penalty / --no-repeat-ngram (or the model's "
                        "generation_config.json's)")
    registers = registers or model_registers(model) or 16
    info(f"loading {model} ({registers} registers) ...")
    m, tok = load_decoder(model, dtype=dtype, device=device, system="tip", quantize=quantize,
                          num_registers=registers)
    pages = max_batch * (-(-pool_size // page_size) + registers + 2)
    rt = TipRuntime(m, tok, num_pages=pages, page_size=page_size, num_registers=registers)
    defaults = TipDecodeConfig(policy=policy, budget=budget, batch_size=max_batch,
                               max_new_tokens=max_new_tokens,
                               sampling=SamplingConfig(temperature=values["temperature"],
                                                       top_p=values["top_p"], seed=seed))
    info(f"request defaults: temperature {values['temperature']}, top-p {values['top_p']}")
    return TipServeEngine(rt, defaults, max_queue=max_queue, max_batch=max_batch), defaults


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
