"""Decode a file of prompts with the PASTA runtime, appending one record per prompt."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from solm.core.chat import prompt_ids, text_ids
from solm.core.jsonl import JsonlWriter, done_ids
from solm.core.records import Record
from solm.core.systems.pasta import walk_training_order
from solm.core.systems.pasta_schedule import pasta_metrics
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaDecodeResult, PastaRuntime

DEMO_PROMPTS = Path(__file__).with_name("demo_prompts.jsonl")


@dataclass
class PastaDecodeSummary:
    done: int = 0
    skipped: int = 0
    flagged: dict[str, int] = field(default_factory=dict)
    content_tokens: int = 0
    forward_passes: int = 0
    kv_read: int = 0
    decode_s: float = 0.0

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["tokens_per_s"] = self.content_tokens / self.decode_s if self.decode_s else 0.0
        return d


def result_record(rt: PastaRuntime, rec: Record, res: PastaDecodeResult, mode: str) -> dict:
    tok = rt.tokenizer
    attrs, _ = walk_training_order(res.ids, rt.vocab) if mode == "parallel" else (None, None)
    content_ids = ([t for t, a in zip(res.ids, attrs) if not a.is_tag] if attrs is not None
                   else res.ids)
    metrics = pasta_metrics(res.ids, rt.vocab, attrs) if mode == "parallel" else None
    response = tok.decode(content_ids, skip_special_tokens=True)
    return {
        "id": rec.id, "prompt": rec.prompt, "mode": mode,
        "response": response,
        "annotated": tok.decode(res.ids, skip_special_tokens=True),
        # the answer's length as text (a model may write a word in pieces the tokenizer
        # would not choose): what every method's count means, comparable across methods
        "content_tokens": len(text_ids(tok, response)),
        "critical_path": metrics.critical_path if metrics else len(res.ids),
        "promises": metrics.promises if metrics else 0,
        "total_tokens": len(res.ids),
        "parallelism": round(metrics.parallelism, 4) if metrics else 1.0,
        "content_speedup": round(metrics.content_speedup, 4) if metrics else 1.0,
        "forward_passes": res.forward_passes, "threads": res.threads,
        "wall_s": round(res.wall_s, 4), "prefill_s": round(res.prefill_s, 4),
        "decode_s": round(res.decode_s, 4), "compile_s": round(res.compile_s, 2),
        "flags": res.flags,
    }


def decode_file(rt: PastaRuntime, records: Iterable[Record], out: Path,
                config: PastaDecodeConfig,
                on_row: Callable[[PastaDecodeSummary, dict], None] | None = None
                ) -> PastaDecodeSummary:
    summary = PastaDecodeSummary()
    seen = done_ids(out)
    with JsonlWriter(out) as writer:
        for rec in records:
            if rec.id in seen:
                summary.skipped += 1
                continue
            ids = prompt_ids(rt.tokenizer, rec.prompt, rec.system)
            res = rt.generate(ids, config)
            row = result_record(rt, rec, res, config.mode)
            writer.write(row)
            summary.done += 1
            summary.content_tokens += row["content_tokens"]
            summary.forward_passes += res.forward_passes
            summary.kv_read += res.kv_read
            summary.decode_s += res.decode_s
            for f in res.flags:
                summary.flagged[f] = summary.flagged.get(f, 0) + 1
            if on_row:
                on_row(summary, row)
    return summary


def decode_file_batched(batched, records: Iterable[Record], out: Path,
                        config: PastaDecodeConfig,
                        on_row: Callable[[PastaDecodeSummary, dict], None] | None = None
                        ) -> PastaDecodeSummary:
    """`decode_file` through a `BatchedPastaRuntime`: rows are written as requests finish
    (finishing order; a rerun skips the ids written). A row's own `wall_s` counts the time
    its batch mates shared with it; the summary's `decode_s` is the run's wall time, so its
    tokens/s is the throughput of the batch."""
    import time

    from solm.decode.pasta.batched import BatchRequest

    summary = PastaDecodeSummary()
    seen = done_ids(out)
    todo = {}
    for rec in records:
        if rec.id in seen:
            summary.skipped += 1
        else:
            todo[rec.id] = rec
    rt = batched.rules
    started = time.perf_counter()
    requests = (BatchRequest(rid, prompt_ids(rt.tokenizer, rec.prompt, rec.system), config)
                for rid, rec in todo.items())
    with JsonlWriter(out) as writer:
        for done in batched.run(requests):
            if done.error:
                raise ValueError(f"{done.rid}: {done.error}")
            res = done.result
            row = result_record(rt, todo[done.rid], res, config.mode)
            writer.write(row)
            summary.done += 1
            summary.content_tokens += row["content_tokens"]
            summary.forward_passes = batched.steps  # passes are shared by the whole batch
            summary.kv_read += res.kv_read
            summary.decode_s = time.perf_counter() - started
            for f in res.flags:
                summary.flagged[f] = summary.flagged.get(f, 0) + 1
            if on_row:
                on_row(summary, row)
    return summary
