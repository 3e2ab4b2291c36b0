"""What a PASTA decode row holds, its summary, and the runners a decode job feeds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from solm.core.chat import text_ids
from solm.core.records import Record
from solm.core.systems.pasta import walk_training_order
from solm.core.systems.pasta_schedule import pasta_metrics
from solm.decode.jobs import DecodeSummary
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaDecodeResult, PastaRuntime
from solm.decode.protocol import Done, Job

DEMO_PROMPTS = Path(__file__).with_name("demo_prompts.jsonl")


@dataclass
class PastaDecodeSummary(DecodeSummary):
    content_tokens: int = 0
    forward_passes: int = 0
    kv_read: int = 0
    decode_s: float = 0.0

    def add(self, row: dict, result: PastaDecodeResult, runner, seconds: float) -> None:
        self.content_tokens += row["content_tokens"]
        self.kv_read += result.kv_read
        self.forward_passes = runner.forward_passes
        self.decode_s = runner.decode_seconds(seconds)

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["tokens_per_s"] = self.content_tokens / self.decode_s if self.decode_s else 0.0
        return d


def result_record(rt: PastaRuntime, rec: Record, res: PastaDecodeResult, mode: str) -> dict:
    tok = rt.tokenizer
    attrs, _ = walk_training_order(res.ids, rt.vocab) if mode == "parallel" else (None, None)
    content_ids = ([t for t, a in zip(res.ids, attrs) if not a.is_tag] if attrs is not None
                   else res.ids)
    metrics = pasta_metrics(res.ids, rt.vocab, attrs, res.unfed) if mode == "parallel" \
        else None
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
        "forward_passes": res.forward_passes, "tokens_fed": res.tokens_fed,
        "threads": res.threads,
        # blocks the runtime closed at their promise + slack, or looping (flags say which)
        "guarded_blocks": res.guarded,
        "wall_s": round(res.wall_s, 4), "prefill_s": round(res.prefill_s, 4),
        "decode_s": round(res.decode_s, 4), "compile_s": round(res.compile_s, 2),
        "flags": res.flags,
    }


class PastaRunner:
    """One prompt at a time through `PastaRuntime` (compiled steps where they pay): each
    row's times are its own."""

    def __init__(self, rt: PastaRuntime, config: PastaDecodeConfig):
        self.rt, self.config = rt, config
        self.forward_passes, self._decode_s = 0, 0.0

    def run(self, jobs: Iterable[Job]) -> Iterator[Done]:
        for job in jobs:
            why = self.rt.refusal(job.prompt_ids, self.config)
            if why:
                yield Done(job.rid, None, error=why)
                continue
            res = self.rt.generate(list(job.prompt_ids), self.config)
            self.forward_passes += res.forward_passes
            self._decode_s += res.decode_s
            yield Done(job.rid, res)

    def decode_seconds(self, wall_s: float) -> float:
        return self._decode_s

    def row(self, job: Job, res: PastaDecodeResult) -> dict:
        return result_record(self.rt, job.record, res, self.config.mode)


class BatchedPastaRunner(PastaRunner):
    """Continuous batching over one KV pool (`BatchedPastaRuntime`): rows are written in
    finishing order; a row's own `wall_s` counts the time its batch mates shared with it, and
    the summary's `decode_s` is the run's wall time (its tokens/s is the batch's throughput);
    its forward passes are the passes the whole batch shared."""

    def __init__(self, batched, config: PastaDecodeConfig):
        super().__init__(batched.rules, config)
        self.batched = batched

    def run(self, jobs: Iterable[Job]) -> Iterator[Done]:
        from solm.decode.pasta.batched import BatchRequest

        requests = (BatchRequest(job.rid, list(job.prompt_ids), self.config) for job in jobs)
        for done in self.batched.run(requests):
            self.forward_passes = self.batched.steps
            yield done

    def decode_seconds(self, wall_s: float) -> float:
        return wall_s
