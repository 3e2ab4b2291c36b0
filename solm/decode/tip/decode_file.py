"""Decode a prompt file with the paged runtime: K samples per prompt, resumable, with KV stats."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from solm.core.chat import prompt_ids
from solm.core.jsonl import JsonlWriter, read_jsonl
from solm.core.records import Record
from solm.decode.tip.runtime import TipDecodeConfig, TipRequest, TipResult, TipRuntime


@dataclass
class TipSummary:
    policy: str
    done: int = 0
    skipped: int = 0
    generated_tokens: int = 0
    wall_s: float = 0.0
    live_token_steps: float = 0.0  # sum over requests of mean live tokens x steps
    steps: int = 0
    peak_pages: int = 0
    flagged: dict[str, int] = field(default_factory=dict)

    def add(self, res: TipResult) -> None:
        self.done += 1
        self.generated_tokens += res.generated
        self.live_token_steps += res.mean_live_tokens * res.generated
        self.steps += res.generated
        self.peak_pages = max(self.peak_pages, res.peak_pages)
        for f in res.flags:
            self.flagged[f] = self.flagged.get(f, 0) + 1

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["throughput_tok_s"] = self.generated_tokens / self.wall_s if self.wall_s else 0.0
        d["mean_live_tokens"] = self.live_token_steps / self.steps if self.steps else 0.0
        return d


def result_row(rec: Record, sample: int, res: TipResult, tokenizer, policy: str) -> dict:
    return {
        "id": rec.id, "sample": sample, "policy": policy, "prompt": rec.prompt,
        "response": tokenizer.decode(res.ids, skip_special_tokens=True),
        "generated": res.generated, "mean_live_tokens": round(res.mean_live_tokens, 1),
        "peak_live_tokens": res.peak_live_tokens, "peak_pages": res.peak_pages,
        "fragmentation": round(res.fragmentation, 4), "prefill_s": round(res.prefill_s, 3),
        "decode_s": round(res.decode_s, 3), "flags": res.flags,
    }


def decode_prompts(rt: TipRuntime, records: Iterable[Record], samples: int, out: Path,
                   config: TipDecodeConfig,
                   on_result: Callable[[TipSummary, dict], None] | None = None) -> TipSummary:
    """Run every (prompt, sample) not yet in `out`; rows are appended as requests finish."""
    done = {(r["id"], r["sample"]) for r in read_jsonl(out, skip_partial_last_line=True)} \
        if out.exists() else set()
    summary = TipSummary(config.policy)
    records = list(records)
    jobs: list[tuple[Record, int]] = []
    for rec in records:
        for k in range(samples):
            if (rec.id, k) in done:
                summary.skipped += 1
            else:
                jobs.append((rec, k))
    requests = (TipRequest(i, prompt_ids(rt.tokenizer, rec.prompt, rec.system), seed=k)
                for i, (rec, k) in enumerate(jobs))
    started = time.perf_counter()
    with JsonlWriter(out) as writer:
        for res in rt.run(requests, config):
            rec, k = jobs[res.rid]
            row = result_row(rec, k, res, rt.tokenizer, config.policy)
            writer.write(row)
            summary.add(res)
            summary.wall_s = time.perf_counter() - started
            if on_result:
                on_result(summary, row)
    summary.wall_s = time.perf_counter() - started
    return summary
