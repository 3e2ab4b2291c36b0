"""TIP as a decode system: the paged runtime under an eviction policy, K samples per prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from solm.core.settings import setting
from solm.decode.registry import (CompiledEngine, DecodeSystem, Display, EngineChoice,
                                  register_system)
from solm.engines import choose, engine_note, get_engine, load_on_engine
from solm.decode.tip.config import TipDecodeConfig
from solm.decode.tip.decode_file import TipSummary


@dataclass
class TipEngine(CompiledEngine, EngineChoice):
    registers: Optional[int] = setting(None, "Thought registers <reg_0> ... <reg_{N-1}> "
                                             "(default: the model's solm.json, else 16).",
                                       min=1)
    page_size: int = setting(64, "Tokens per KV page.", min=1)
    num_pages: int = setting(2048, "Pages in the pool (shared by the batch).", min=1)
    samples: int = setting(1, "Samples per problem (sample k uses seed + k).", min=1)


def prepare(config: TipDecodeConfig, engine: TipEngine, model: str) -> None:
    from solm.core.models import resolve_registers
    from solm.decode.tip.policies import make_policy

    policy = make_policy(config.policy, config.budget, engine.page_size)  # bad flags fail here
    engine.registers = resolve_registers(model, engine.registers)
    engine.engine = choose(engine.engine, "tip", config=config, settings=engine, model=model,
                           policy=policy)


def check_record(record) -> None:
    """A problem row with a gold answer must have one that grades (text or a number)."""
    from solm.core.errors import DataError
    from solm.core.math_task import GoldTypeError, gold_answer
    from solm.decode.tip.decode_file import GOLD_FIELDS

    if not any(k in record.meta for k in GOLD_FIELDS):
        return
    path, line, _ = record.origin or (None, None, None)
    try:
        gold_answer(record.meta)
    except KeyError:
        raise DataError("expected the gold answer, got null", path=path or None,
                        line=line or None, field=next(k for k in GOLD_FIELDS
                                                      if k in record.meta)) from None
    except GoldTypeError as e:
        raise DataError(str(e), path=path or None, line=line or None, field=e.field) from None


def load(model: str, engine: TipEngine, dtype: str, device: str | None):
    return load_on_engine(model, engine, dtype, device, "tip", engine.registers)


def engine_kv(engine: TipEngine, config: TipDecodeConfig):
    """The engine's paged KV (None: the runtime's own pages): one stream per request (they
    share nothing), so each token's attention reads its own request's cells only."""
    cells = min(engine.num_pages * engine.page_size,
                config.batch_size * (config.max_new_tokens + 2048))
    return get_engine(engine.engine).step("paged", engine, cells, config.batch_size,
                                          independent=True)


def runner(model, tokenizer, config: TipDecodeConfig, engine: TipEngine, prompts: int,
           single: bool):
    from solm.engines.torch.compiled import should_compile
    from solm.decode.tip.decode_file import TipRunner
    from solm.decode.tip.runtime import TipRuntime

    jobs = max(1, prompts) * engine.samples
    kv = engine_kv(engine, config)
    rt = TipRuntime(model, tokenizer, num_pages=engine.num_pages, page_size=engine.page_size,
                    num_registers=engine.registers, kv=kv,
                    compile=kv is None and should_compile(engine.compile,
                                                          jobs * config.max_new_tokens,
                                                          model.device))
    out = TipRunner(rt, config)
    out.engine = engine.engine
    return out


def status(summary: TipSummary, row: dict) -> str:
    return (f"{summary.generated_tokens / max(summary.wall_s, 1e-9):.0f} tok/s, live "
            f"{row['mean_live_tokens']:.0f}")


def steps_text(row: dict) -> str:
    """The answer step by step: each step's register, its text, and the step that killed it
    (its KV pages freed) or that it is still live; without steps, the answer as written."""
    steps = row.get("steps")
    if not steps:
        return row.get("response", "")
    width = len(str(len(steps)))
    lines = []
    for i, s in enumerate(steps, 1):
        fate = (f"killed by step {s['killed_by']}" if s["killed_by"] is not None
                else "live to the end")
        lines.append(f"step {i:>{width}} <reg_{s['register']}> {s['text'].strip()}   [{fate}]")
    return "\n".join(lines)


def row_figures(row: dict) -> str:
    """A row's KV figures and, for a problem with its answer, the check."""
    steps = row.get("steps") or []
    killed = sum(1 for s in steps if s["killed_by"] is not None)
    line = (f"{row['generated']} tokens, {len(steps)} steps, {killed} killed by a register "
            f"reuse; live KV {row['mean_live_tokens']:.0f} tokens on average (peak "
            f"{row['peak_live_tokens']}, {row['peak_pages']} pages)")
    if "correct" in row:
        line += (f"; answer {row['prediction']}, expected {row['gold']}: "
                 f"{'correct' if row['correct'] else 'wrong'}")
    return line + (f"; flags: {', '.join(row['flags'])}" if row["flags"] else "")


def answer(runner, job, engine: TipEngine) -> tuple[str, list[str]]:
    """One problem: its steps with their registers and fates, and its KV figures."""
    done = next(iter(runner.run([job])))
    res = done.result
    row = runner.row(job, res)
    return steps_text(row), [row_figures(row) + f"; "
                             f"{res.generated / max(res.decode_s, 1e-9):.1f} tokens/s"]


SYSTEM = register_system(DecodeSystem(
    name="tip", help="TIP: thought registers whose reuse frees KV pages.",
    config_cls=TipDecodeConfig, engine_cls=TipEngine, load=load, runner=runner,
    summary_cls=TipSummary, sampling=("temperature", "top_p", "seed"), per_sample=True,
    samples=lambda engine: engine.samples, default_out="runs/tip_decode.jsonl",
    row_engine_settings=("registers", "page_size", "quantize", "engine", "gguf_type"),
    row_excluded=("batch_size",), prepare=prepare, check_record=check_record,
    display=Display(status=status, shown_rows=1, answer=answer, row_text=steps_text,
                    row_figures=row_figures,
                    describe=lambda runner: (f"decoding ({runner.config.policy}"
                                             f"{engine_note(runner.engine)})")),
    # the thesis' sampling for reasoning traces; a budget the budgeted policies can use
    command_defaults={"temperature": 0.6, "top_p": 0.95, "budget": 2048},
    command_default_reasons={"temperature": "the thesis' sampling for reasoning traces",
                             "top_p": "the thesis' sampling for reasoning traces",
                             "budget": "a budget the budgeted policies can use"}))
