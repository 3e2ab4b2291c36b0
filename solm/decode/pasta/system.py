"""PASTA as a decode system: its config, engine settings, runners and rows, registered."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from solm.core.settings import setting
from solm.decode.pasta.config import PastaDecodeConfig
from solm.decode.pasta.decode_file import DEMO_PROMPTS, PastaDecodeSummary, result_record
from solm.decode.registry import (CompiledEngine, DecodeSystem, Display, EngineChoice,
                                  EvalKinds, register_system)
from solm.engines import choose, engine_note, get_engine, load_on_engine


@dataclass
class PastaEngine(CompiledEngine, EngineChoice):
    pool_size: int = setting(2048, "KV pool slots shared by all threads (per prompt in "
                                   "flight).", min=2)
    batch_size: Optional[int] = setting(
        None, "Prompts decoded together (continuous batching over one KV pool of batch-size x "
        "--pool-size slots; rows are written as they finish). Default: 16 on a CPU, 32 on "
        "CUDA; 1 decodes one prompt at a time. --compile auto compiles only batch-size 1 "
        "steps.", min=1)
    compare: bool = setting(False, "With a single prompt: also decode it sequentially and "
                                   "print the realized speedup.")


def prepare(config: PastaDecodeConfig, engine: PastaEngine, model: str) -> None:
    engine.engine = choose(engine.engine, "pasta", config=config, settings=engine, model=model)


def load(model: str, engine: PastaEngine, dtype: str, device: str | None):
    return load_on_engine(model, engine, dtype, device, "pasta")


def runtime_on_engine(model: str, mode: str, engine: str, gguf_type: str, dtype: str,
                      device: str | None, pool_size: int, compile: bool | None = False,
                      quantize: str | None = None, expected_tokens: int = 0,
                      **engine_settings):
    """(a one-request `PastaRuntime` for `model` on the engine `engine` resolves to for a
    `mode` decode, that engine's settings): for `pasta demo`, `pasta chat` and other single
    decodes. `compile`: torch's flag (None: when `expected_tokens` repay it)."""
    from solm.engines.torch.compiled import should_compile

    settings = PastaEngine(engine=engine, gguf_type=gguf_type,
                           pool_size=pool_size, compile=compile, quantize=quantize,
                           **engine_settings)
    prepare(PastaDecodeConfig(mode=mode), settings, model)
    m, tok = load(model, settings, dtype, device)
    compiled = get_engine(settings.engine).torch_step and should_compile(compile, expected_tokens,
                                                                          m.device)
    return one_request_runtime(m, tok, settings, compiled), settings


def one_request_runtime(model, tokenizer, engine: PastaEngine, compiled: bool = False):
    """A `PastaRuntime` over `engine.pool_size` slots on the engine `prepare` chose (and
    `load` exported for)."""
    from solm.decode.pasta.runtime import PastaRuntime

    forward = get_engine(engine.engine).step("pool", engine, engine.pool_size)
    return PastaRuntime(model, tokenizer, pool_size=engine.pool_size,
                        compile=compiled and forward is None, forward=forward)


def batched_on_engine(model: str, mode: str, engine: str, gguf_type: str, dtype: str,
                      device: str | None, pool_size: int, batch: int,
                      independent: bool = False):
    """(a `BatchedPastaRuntime` for `model` on the engine `engine` resolves to for `mode`
    decodes over `pool_size` slots, that engine's name): for `pasta prefs` and `pasta
    distill`. `independent`: requests share nothing (sequential decodes, no shared prompt);
    an engine may then give each a KV stream of `pool_size / batch` cells of its own."""
    from solm.decode.pasta.batched import BatchedPastaRuntime

    settings = PastaEngine(engine=engine, gguf_type=gguf_type)
    prepare(PastaDecodeConfig(mode=mode), settings, model)
    m, tok = load(model, settings, dtype, device)
    forward = get_engine(settings.engine).step("slots", settings, pool_size,
                                               batch if independent else None, independent)
    return BatchedPastaRuntime(m, tok, pool_size, batch, forward=forward), settings.engine


def engine_runner(model, tokenizer, config: PastaDecodeConfig, engine: PastaEngine,
                  batch: int, forward):
    """Continuous batching on another engine's step (`forward`, over `batch` requests'
    pools): even one request goes through the batched runtime."""
    from solm.decode.pasta.batched import BatchedPastaRuntime
    from solm.decode.pasta.decode_file import BatchedPastaRunner

    out = BatchedPastaRunner(BatchedPastaRuntime(model, tokenizer,
                                                 pool_size=engine.pool_size * batch,
                                                 max_batch=batch, forward=forward), config)
    out.compiled, out.batch_size, out.engine = False, batch, engine.engine
    return out


def runner(model, tokenizer, config: PastaDecodeConfig, engine: PastaEngine, prompts: int,
           single: bool):
    from solm.engines.torch.compiled import should_compile
    from solm.decode.pasta.batched import BatchedPastaRuntime, default_batch_size
    from solm.decode.pasta.decode_file import BatchedPastaRunner, PastaRunner
    from solm.decode.pasta.runtime import PastaRuntime

    batch = 1 if single else (engine.batch_size or default_batch_size(model.device))
    batch = min(batch, max(1, prompts))
    # parallel: a sequence per thread of every request in flight, as many as the engine holds
    forward = get_engine(engine.engine).step(
        "slots", engine, engine.pool_size * batch,
        None if config.mode == "parallel" else 2 * batch)
    if forward is not None:
        return engine_runner(model, tokenizer, config, engine, batch, forward)
    # batched steps compile only when asked: their time goes to GEMMs and per-request
    # attention, and a compiled step measured no faster on the CPUs here (README)
    compiled = should_compile(engine.compile, max(1, prompts) * min(config.max_new_tokens,
                                                                    engine.pool_size),
                              model.device) if batch == 1 else bool(engine.compile)
    if batch == 1:
        out = PastaRunner(PastaRuntime(model, tokenizer, pool_size=engine.pool_size,
                                       compile=compiled), config)
    else:
        out = BatchedPastaRunner(BatchedPastaRuntime(model, tokenizer,
                                                     pool_size=engine.pool_size * batch,
                                                     max_batch=batch, compile=compiled), config)
    out.compiled, out.batch_size, out.engine = compiled, batch, "torch"
    return out


def describe(runner) -> str:
    batch = runner.batch_size
    return (f"decoding ({runner.config.mode}{f', batches of {batch}' if batch > 1 else ''}"
            f"{engine_note(runner.engine)})")


def decode_bandwidth(model, steps: int, kv_read: int, seconds: float) -> dict:
    """Bandwidth a decode achieved and its share of the machine's (probed once, cached)."""
    from solm.core.quantize import weight_bytes
    from solm.engines.bandwidth import achieved, kv_bytes_per_token, machine_bandwidth

    if not steps or seconds <= 0:
        return {}
    device = next(model.parameters()).device
    return achieved(weight_bytes(model), steps, kv_read, kv_bytes_per_token(model), seconds,
                    machine_bandwidth(device))


def figures_line(row: dict, res, model=None) -> str:
    """How a decode went, in one line: tokens, threads, steps against one token per step,
    content tokens/s, and (given the model) the memory bandwidth the steps achieved."""
    from solm.decode.compare import steps_phrase

    line = (f"{row['content_tokens']} content tokens, {row['threads']} threads, "
            f"{row['forward_passes']} forward passes (critical path {row['critical_path']}): "
            f"{steps_phrase(row['content_tokens'], row['critical_path'], row['promises'] > 0)}; "
            f"{row['content_tokens'] / max(row['wall_s'], 1e-9):.1f} content tokens/s")
    if model is not None:
        bw = decode_bandwidth(model, res.forward_passes, res.kv_read, res.decode_s)
        if bw:
            line += (f"; {bw['bandwidth_gbs']:.1f} GB/s = {bw['bandwidth_fraction']:.0%} of "
                     f"this machine's {bw['machine_gbs']:.1f} GB/s")
    if res.compile_s:
        line += f"; {res.compile_s:.1f} s building compiled graphs, not counted"
    return line + (f"; flags: {', '.join(res.flags)}" if res.flags else "")


def answer(runner, job, engine: PastaEngine) -> tuple[str, list[str]]:
    """One prompt: the answer, its figures; with `compare`, the sequential decode's figures
    beside them (`solm.decode.compare`), both paths warmed before either is timed."""
    from solm.decode.compare import compare_lines

    if not get_engine(engine.engine).torch_step:
        return engine_answer(runner, job, engine)
    rt, cfg, ids = runner.rt, runner.config, list(job.prompt_ids)
    if engine.compare:
        rt.generate(ids, replace(cfg, max_new_tokens=4))
        rt.generate(ids, replace(cfg, mode="sequential", max_new_tokens=4))
    res = rt.generate(ids, cfg)
    row = result_record(rt, job.record, res, cfg.mode)
    lines = [figures_line(row, res, rt.model)]
    if engine.compare and cfg.mode == "parallel":
        seq_res = rt.generate(ids, replace(cfg, mode="sequential"))
        lines += compare_lines(row, result_record(rt, job.record, seq_res, "sequential"))
    elif engine.compare:
        lines.append("--compare compares with --mode parallel; this decode was sequential")
    return row["response"], lines


def engine_answer(runner, job, engine: PastaEngine) -> tuple[str, list[str]]:
    """`answer` on another engine: the decode through the batched runner; with `compare`,
    the sequential decode on the same engine beside it, both warmed before either is
    timed."""
    from solm.decode.compare import compare_lines
    from solm.decode.pasta.decode_file import BatchedPastaRunner

    cfg = runner.config
    sequential = BatchedPastaRunner(runner.batched, replace(cfg, mode="sequential"))

    def decode(r):
        done = next(iter(r.run([job])))
        return runner.row(job, done.result) if r is runner else r.row(job, done.result), \
            done.result

    if engine.compare:
        for r in (runner, sequential):
            short = replace(r.config, max_new_tokens=4)
            next(iter(BatchedPastaRunner(runner.batched, short).run([job])))
    row, res = decode(runner)
    lines = [figures_line(row, res) + f" ({engine.engine})"]
    if engine.compare and cfg.mode == "parallel":
        seq_row, _ = decode(sequential)
        lines += compare_lines(row, seq_row)
    elif engine.compare:
        lines.append("--compare compares with --mode parallel; this decode was sequential")
    return row["response"], lines


def report(rows: list, summary: PastaDecodeSummary, runner, engine: PastaEngine) -> dict:
    from solm.decode.pasta.format_stats import format_stats

    speed = {"engine": runner.engine, "compiled": runner.compiled, "quantize": engine.quantize,
             "batch_size": runner.batch_size}
    if get_engine(runner.engine).torch_step:
        speed.update(decode_bandwidth(runner.rt.model, summary.forward_passes, summary.kv_read,
                                      summary.decode_s))
    else:  # the engine's weight format and the file it decoded (`gguf_type` -> `gguf`)
        fmt = get_engine(runner.engine).format_setting
        speed.update({fmt: getattr(engine, fmt, None),
                      fmt.removesuffix("_type"): getattr(engine, fmt.removesuffix("_type"),
                                                         None)})
    return {"format": format_stats(rows).to_dict() if rows else {}, "speed": speed}


def status(summary: PastaDecodeSummary, row: dict) -> str:
    return f"{summary.content_tokens / max(summary.decode_s, 1e-9):.1f} tok/s"


def row_figures(row: dict) -> str:
    return (f"{row['content_tokens']} tokens, {row['forward_passes']} passes, "
            f"{row['threads']} threads" + (f", {','.join(row['flags'])}" if row['flags']
                                           else ""))


def eval_row(row: dict) -> dict:
    keep = ("content_tokens", "critical_path", "forward_passes", "promises", "threads",
            "guarded_blocks", "wall_s", "prefill_s", "decode_s", "flags")
    out = {"output": row["response"], **{k: row[k] for k in keep},
           "generated_tokens": row["total_tokens"], "total_tokens": row["total_tokens"]}
    if row["mode"] == "parallel":
        out["annotated"] = row["annotated"]
    return out


SYSTEM = register_system(DecodeSystem(
    name="pasta", help="PASTA: promised chunks decoded as parallel threads in one KV pool.",
    config_cls=PastaDecodeConfig, engine_cls=PastaEngine, load=load, runner=runner,
    summary_cls=PastaDecodeSummary, demo_prompts=DEMO_PROMPTS,
    default_out="runs/decode.jsonl", row_engine_settings=("quantize", "engine", "gguf_type"),
    prepare=prepare,
    display=Display(status=status, report=report, describe=describe, shown_rows=3,
                    row_figures=row_figures, answer=answer),
    # APAR and PASTA decode alike: the models differ in how they were trained
    evaluation=EvalKinds(methods={"sequential": {"mode": "sequential"},
                                  "pasta": {"mode": "parallel"}, "apar": {"mode": "parallel"}},
                         eval_row=eval_row)))


# the GGUF type of llama.cpp's fastest one-token pass on every CPU measured so far (docs:
# engines): the yardstick's where nothing is measured here
FASTEST_SEQUENTIAL_GGUF = "q4_0"


def yardstick_settings(model: str, cells: int):
    """The llama.cpp engine settings of the fastest sequential decoding of `model` here,
    its GGUF exported (on first use) into `.gguf`: the one-token GGUF type measured fastest
    here (unmeasured: q4_0). None where llama.cpp is not installed or cannot load the model,
    with the reason as a notice."""
    from solm.core.errors import SolmError
    from solm.core.notices import notice
    from solm.engines.cost import fastest_one_token_format

    llama = get_engine("llama.cpp")
    if llama.unavailable():
        notice(f"no llama.cpp yardstick: {llama.unavailable()}")
        return None
    gguf_type = fastest_one_token_format("llama.cpp", model, FASTEST_SEQUENTIAL_GGUF)
    settings = PastaEngine(engine="llama.cpp", gguf_type=gguf_type, pool_size=cells)
    try:
        prepare(PastaDecodeConfig(mode="sequential"), settings, model)
        load(model, settings, "auto", None)  # exports the GGUF on first use
    except SolmError as e:
        notice(f"no llama.cpp yardstick: {e}")
        return None
    return settings


def sequential_yardstick(model: str, cells: int):
    """(its name in words, a function decoding n tokens from prompt ids and returning the
    decode seconds, a closer) for the fastest sequential decoding of `model` on this machine:
    llama.cpp's own one-token loop (C, greedy) on `yardstick_settings`' GGUF, in a process
    of its own (`solm.engines.llamacpp.fresh_loop`); None where llama.cpp cannot run it."""
    settings = yardstick_settings(model, cells)
    if settings is None:
        return None
    loop = get_engine("llama.cpp").sequential_loop(settings, cells)
    return (f"llama.cpp's own loop, {settings.gguf_type} GGUF (one token a pass, argmax of "
            f"its logits, in a process of its own)",
            lambda ids, n: loop.generate(ids, n)[2], loop.close)
