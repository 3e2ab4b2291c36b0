"""Skeleton-of-Thought as a decode system (a baseline of `pasta eval run`): the skeleton, then
every point as a thread of one KV pool; many questions at a time when batched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

from solm.core.chat import text_ids
from solm.core.settings import setting
from solm.decode.jobs import DecodeSummary
from solm.decode.protocol import Done, Job
from solm.decode.registry import DecodeSystem, EngineChoice, EvalKinds, register_system
from solm.decode.sot.config import SotConfig
from solm.engines import choose, get_engine, load_on_engine


@dataclass
class SotEngine(EngineChoice):
    pool_size: int = setting(2048, "KV pool slots per question in flight.", min=2)
    batch_size: int = setting(1, "Questions decoded together (continuous batching).", min=1)
    compile: Optional[bool] = setting(None, "Compile the decode step (torch engine).",
                                      flags=("--compile/--no-compile",))


def prepare(config: SotConfig, engine: SotEngine, model: str) -> None:
    """Any model's points fork from one prefix at consecutive positions: llama.cpp can
    always run them."""
    engine.engine = choose(engine.engine, "sot", config=config, settings=engine, model=model)


class SotRunner:
    """One question at a time (timed rows), or `batch` together (`BatchedSotRuntime`). On
    an engine with its own step every question runs through `BatchedSotRuntime` on it (a
    point is a sequence forked from its prefix's), `batch` at a time."""

    def __init__(self, model, tokenizer, config: SotConfig, engine: SotEngine, batch: int):
        self.config, self.batch, self.tokenizer = config, batch, tokenizer
        self.engine = engine.engine
        forward = get_engine(engine.engine).step("slots", engine, engine.pool_size * batch)
        self.one_at_a_time = forward is None and batch == 1
        if self.one_at_a_time:
            from solm.decode.sot.runtime import SotRuntime

            self.rt = SotRuntime(model, tokenizer, pool_size=engine.pool_size,
                                 compile=bool(engine.compile))
        else:
            from solm.decode.sot.batched import BatchedSotRuntime

            self.rt = BatchedSotRuntime(model, tokenizer, pool_size=engine.pool_size * batch,
                                        max_batch=batch, forward=forward,
                                        compile=forward is None and bool(engine.compile))

    def run(self, jobs: Iterable[Job]) -> Iterator[Done]:
        if self.one_at_a_time:
            for job in jobs:
                yield Done(job.rid, self.rt.generate(job.record.prompt, self.config))
            return
        for rid, res in self.rt.run(((job.rid, job.record.prompt) for job in jobs),
                                    self.config):
            yield Done(rid, res)

    def row(self, job: Job, res) -> dict:
        return {"id": job.record.id, "prompt": job.record.prompt, "response": res.text,
                "content_tokens": len(text_ids(self.tokenizer, res.text)),
                "generated_tokens": res.generated_tokens,
                "skeleton_tokens": res.skeleton_tokens, "point_tokens": sum(res.point_tokens),
                "critical_path": res.critical_path, "forward_passes": res.forward_passes,
                "points": len(res.points), "wall_s": round(res.wall_s, 4),
                "prefill_s": round(res.prefill_s, 4), "decode_s": round(res.decode_s, 4),
                "flags": res.flags}


def load(model: str, engine: SotEngine, dtype: str, device: str | None):
    return load_on_engine(model, engine, dtype, device, "pasta")


def runner(model, tokenizer, config: SotConfig, engine: SotEngine, prompts: int,
           single: bool) -> SotRunner:
    batch = 1 if single else max(1, min(engine.batch_size, prompts))
    return SotRunner(model, tokenizer, config, engine, batch)


def eval_row(row: dict) -> dict:
    keep = ("content_tokens", "generated_tokens", "skeleton_tokens", "point_tokens",
            "critical_path", "forward_passes", "points", "wall_s", "prefill_s", "decode_s",
            "flags")
    return {"output": row["response"], **{k: row[k] for k in keep}}


SYSTEM = register_system(DecodeSystem(
    name="sot", help="Skeleton-of-Thought: a skeleton of points, each point a thread.",
    config_cls=SotConfig, engine_cls=SotEngine, load=load, runner=runner,
    summary_cls=DecodeSummary, default_out="runs/sot_decode.jsonl",
    evaluation=EvalKinds(methods={"sot": {}}, eval_row=eval_row), prepare=prepare))
