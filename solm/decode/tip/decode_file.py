"""What a TIP decode row holds (one per problem and sample), its summary, and the runner a
decode job feeds: K samples per prompt, sample k seeded seed + k, with KV figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from solm.core.records import Record
from solm.decode.jobs import DecodeSummary
from solm.decode.protocol import Done, Job
from solm.decode.tip.runtime import TipDecodeConfig, TipRequest, TipResult, TipRuntime


@dataclass
class TipSummary(DecodeSummary):
    """A TIP decode's totals. `mean_live_tokens` averages each sample's mean live KV, as
    `tip eval` does (every sample counts once, whatever its length); `reasoning_steps` counts
    the steps the model opened (a register each), `decode_passes` the tokens decoded."""

    policy: str = ""
    generated_tokens: int = 0
    wall_s: float = 0.0
    samples: int = 0
    live_tokens_sum: float = 0.0  # sum over samples of each one's mean live tokens
    decode_passes: int = 0
    reasoning_steps: int = 0
    steps_killed: int = 0
    peak_pages: int = 0

    @classmethod
    def start(cls, config: TipDecodeConfig) -> "TipSummary":
        return cls(policy=config.policy)

    def add(self, row: dict, res: TipResult, runner, seconds: float) -> None:
        self.generated_tokens += res.generated
        self.samples += 1
        self.live_tokens_sum += res.mean_live_tokens
        self.decode_passes += res.generated
        steps = row.get("steps") or []
        self.reasoning_steps += len(steps)
        self.steps_killed += sum(1 for s in steps if s["killed_by"] is not None)
        self.peak_pages = max(self.peak_pages, res.peak_pages)
        self.wall_s = seconds

    def to_dict(self) -> dict:
        d = super().to_dict()
        d.pop("live_tokens_sum", None)
        d["throughput_tok_s"] = self.generated_tokens / self.wall_s if self.wall_s else 0.0
        d["mean_live_tokens"] = self.live_tokens_sum / self.samples if self.samples else 0.0
        return d


GOLD_FIELDS = ("answer", "final_answer", "expected_answer")


def register_steps(ids: list[int], vocab, tokenizer) -> list[dict]:
    """The response's steps: each one's register (None before the first), its text, and the
    step whose register reuse killed it (None: alive at the end)."""
    from solm.core.systems.tip import TipTracker

    tracker, steps = TipTracker(vocab), []
    for tok in ids:
        step, died = tracker.feed(tok)
        for s in died:
            if 0 < s <= len(steps):
                steps[s - 1]["killed_by"] = step  # the step whose register reuse killed it
        if int(tok) in vocab.registers:
            steps.append({"register": vocab.registers[int(tok)], "ids": [], "killed_by": None})
        elif steps:
            steps[-1]["ids"].append(int(tok))
    return [{"register": s["register"], "text": tokenizer.decode(s["ids"],
                                                                 skip_special_tokens=True),
             "killed_by": s["killed_by"]} for s in steps]


def result_row(rec: Record, sample: int, res: TipResult, tokenizer, policy: str,
               vocab=None) -> dict:
    response = tokenizer.decode(res.ids, skip_special_tokens=True)
    row = {
        "id": rec.id, "sample": sample, "policy": policy, "prompt": rec.prompt,
        "response": response,
        "generated": res.generated, "mean_live_tokens": round(res.mean_live_tokens, 1),
        "peak_live_tokens": res.peak_live_tokens, "peak_pages": res.peak_pages,
        "fragmentation": round(res.fragmentation, 4), "prefill_s": round(res.prefill_s, 3),
        "decode_s": round(res.decode_s, 3), "flags": res.flags,
    }
    if vocab is not None:
        row["steps"] = register_steps(list(res.ids), vocab, tokenizer)
    if any(k in rec.meta for k in GOLD_FIELDS):  # a problem with its answer: graded
        from solm.core.math_task import score_solution

        row.update(score_solution(response, {**rec.meta, "id": rec.id}))
    return row


class TipRunner:
    """The paged runtime under one eviction policy; requests refill the batch as they end."""

    def __init__(self, rt: TipRuntime, config: TipDecodeConfig):
        self.rt, self.config = rt, config

    def run(self, jobs: Iterable[Job]) -> Iterator[Done]:
        requests = (TipRequest(job.rid, list(job.prompt_ids), seed=job.sample) for job in jobs)
        for res in self.rt.run(requests, self.config):
            yield Done(res.rid, res)

    def row(self, job: Job, res: TipResult) -> dict:
        return result_row(job.record, job.sample, res, self.rt.tokenizer, self.config.policy,
                          self.rt.vocab)
