"""Which engine serves a decode system: PASTA and TIP have engines of their own (PASTA streams
its threads and gives log-probs; TIP serves from a paged session), every other registered
system is served through its runner (`RunnerServeEngine`). `solm serve --system NAME` looks
the system up in `solm.decode.registry` and its engine here."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from solm.core.sampling import SamplingConfig
from solm.decode.registry import DecodeSystem


def engine_formats(opts: dict) -> dict:
    """The engines' own format settings the server was given (the rest keep their
    declared defaults)."""
    return {k: opts[k] for k in ("onnx_type",) if opts.get(k)}


def pasta_engine(system: DecodeSystem, model: str, opts: dict, decoding, dtype: str,
                 device: str | None):
    from dataclasses import replace

    from solm.engines.torch.compiled import should_compile
    from solm.decode.pasta.config import PastaDecodeConfig
    from solm.decode.pasta.runtime import PastaRuntime
    from solm.engines import get_engine
    from solm.serve.engine import ServeEngine

    from solm.decode.pasta.system import PastaEngine, load, prepare

    defaults = PastaDecodeConfig(
        mode=opts["mode"], max_new_tokens=opts["max_new_tokens"],
        max_fork_tokens=opts["max_fork_tokens"], penalize=opts["penalize"],
        sampling=SamplingConfig(seed=opts["seed"], **decoding.values))
    settings = PastaEngine(engine=opts.get("engine") or "torch",
                           gguf_type=opts.get("gguf_type") or "q8_0",
                           **engine_formats(opts),
                           quantize=opts["quantize"], pool_size=opts["pool_size"])
    prepare(defaults, settings, model)  # under auto, llama.cpp where the default mode runs
    m, tok = load(model, settings, dtype, device)
    chosen = get_engine(settings.engine)
    # the one-request runtime serves `compare`'s sequential side; a CPU server compiles
    # only when asked: each new shape bucket would stall a request
    pool = chosen.step("pool", settings, opts["pool_size"])
    rt = PastaRuntime(m, tok, pool_size=opts["pool_size"], forward=pool,
                      compile=pool is None and should_compile(opts["compile"], 0, m.device))
    forward = chosen.step("slots", settings, opts["pool_size"] * opts["max_batch"])
    rt.grammar  # built once now, not inside the first request
    engine = ServeEngine(rt, max_queue=opts["max_queue"], max_batch=opts["max_batch"],
                         forward=forward)
    engine.parallel_refusal = chosen.refusal(
        "pasta", config=replace(defaults, mode="parallel"), settings=settings, model=model)
    return engine, defaults, f"{opts['mode']} by default, engine {settings.engine}"


def tip_settings(model: str, opts: dict, decoding):
    """The TIP server's engine settings, its policy checked and the engine chosen (a
    refusal is a one-line error, before anything loads)."""
    from solm.core.errors import SolmError
    from solm.core.models import resolve_registers
    from solm.decode.tip.policies import make_policy
    from solm.decode.tip.system import TipEngine
    from solm.engines import choose

    policy = make_policy(opts["policy"], opts["budget"], opts["page_size"])
    values = decoding.values
    if values.get("repetition_penalty", 1.0) != 1.0 or values.get("no_repeat_ngram"):
        raise SolmError("the TIP runtime applies no repetition penalty or n-gram ban; drop "
                        "--repetition-penalty / --no-repeat-ngram (or the model's "
                        "generation_config.json's)")
    registers = resolve_registers(model, opts["registers"])
    settings = TipEngine(engine=opts.get("engine") or "torch",
                         gguf_type=opts.get("gguf_type") or "q8_0",
                         quantize=opts["quantize"], **engine_formats(opts),
                         registers=registers)
    settings.engine = choose(settings.engine, "tip", settings=settings, model=model,
                             policy=policy)
    return settings


def tip_engine(system: DecodeSystem, model: str, opts: dict, decoding, dtype: str,
               device: str | None):
    """A TIP model on the paged runtime: `pool_size` tokens per batch row."""
    from solm.decode.tip.config import TipDecodeConfig
    from solm.decode.tip.runtime import TipRuntime
    from solm.engines import get_engine, load_on_engine
    from solm.serve.tip_engine import TipServeEngine

    policy, budget, page_size = opts["policy"], opts["budget"], opts["page_size"]
    values = decoding.values
    settings = tip_settings(model, opts, decoding)
    registers, max_batch = settings.registers, opts["max_batch"]
    m, tok = load_on_engine(model, settings, dtype, device, "tip", registers)
    pages = max_batch * (-(-opts["pool_size"] // page_size) + registers + 2)
    kv = get_engine(settings.engine).step("paged", settings, max_batch * opts["pool_size"],
                                          max_batch, independent=True)
    rt = TipRuntime(m, tok, num_pages=pages, page_size=page_size, num_registers=registers,
                    kv=kv)
    defaults = TipDecodeConfig(policy=policy, budget=budget, batch_size=max_batch,
                               max_new_tokens=opts["max_new_tokens"],
                               sampling=SamplingConfig(temperature=values["temperature"],
                                                       top_p=values["top_p"],
                                                       seed=opts["seed"]))
    engine = TipServeEngine(rt, defaults, max_queue=opts["max_queue"], max_batch=max_batch)
    return engine, defaults, f"tip runtime, policy {policy}, engine {settings.engine}"


def runner_engine(system: DecodeSystem, model: str, opts: dict, decoding, dtype: str,
                  device: str | None):
    """Any registered system: its config's defaults with the server's cap and sampling,
    decoded through its runner in batches of --max-batch."""
    from solm.serve.runner_engine import RunnerServeEngine

    engine_names = {f.name for f in dataclasses.fields(system.engine_cls)}
    engine_settings = system.engine_cls(**{k: v for k, v in opts.items()
                                           if k in engine_names and v is not None})
    sampling = SamplingConfig(seed=opts["seed"], **{k: v for k, v in decoding.values.items()
                                                    if k in system.sampling})
    config_names = {f.name for f in dataclasses.fields(system.config_cls)}
    cap = {"max_new_tokens": opts["max_new_tokens"]} if "max_new_tokens" in config_names else {}
    defaults = system.config_cls(sampling=sampling, **cap)
    system.prepare(defaults, engine_settings, model)
    m, tok = system.load(model, engine_settings, dtype, device)
    runner = system.runner(m, tok, defaults, engine_settings, opts["max_batch"], False)
    engine = RunnerServeEngine(system, runner, m, tok, opts["pool_size"],
                               max_queue=opts["max_queue"], max_batch=opts["max_batch"])
    return engine, defaults, f"{system.name} through its runner"


SERVING_ENGINES: dict[str, Callable[..., Any]] = {"pasta": pasta_engine, "tip": tip_engine}


def check_engine(system: DecodeSystem, model: str, opts: dict, decoding) -> None:
    """What `make_engine` would refuse about the settings, said before any model loads."""
    if system.name == "tip":
        tip_settings(model, opts, decoding)


def make_engine(system: DecodeSystem, model: str, opts: dict, decoding, dtype: str,
                device: str | None):
    """(engine, the request defaults, a phrase for the banner) for `system`."""
    return SERVING_ENGINES.get(system.name, runner_engine)(system, model, opts, decoding, dtype,
                                                   device)
