"""Planned Diffusion decodes as rows: one record per prompt, written as each ends (resumable),
with the figures the evaluation reads (content tokens, forward passes, chunk health)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from solm.core.chat import text_ids
from solm.core.pasta_lang import validate
from solm.core.records import Record
from solm.core.stats import repeated_ngram_share
from solm.core.systems.pasta import walk_with_predictors
from solm.core.systems.pdiff import PdiffTracker
from solm.decode.flags import TOPIC_CAPPED
from solm.decode.jobs import DecodeSummary
from solm.decode.pdiff.runtime import (PdiffDecodeConfig, PdiffDecodeResult, PdiffRequest,
                                       PdiffRuntime)
from solm.decode.protocol import Done, Job

REPEAT_N = 3  # n of the repeated n-grams counted inside chunks
# `pdiff decode` without --prompts: prompts the kept pdiff-cpu model answers with a plan of
# chunks (greedy, bf16 on an AMD AVX-512 CPU), so a first try shows diffusion
DEMO_PROMPTS = Path(__file__).with_name("demo_prompts.jsonl")


def chunk_contents(ids: list[int], rt: PdiffRuntime) -> list[list[int]]:
    """Each chunk's content tokens (pads and tags left out), in promise order."""
    v = rt.vocab
    attrs, _, _ = walk_with_predictors(ids, v, PdiffTracker(v))
    by_thread: dict[int, list[int]] = {}
    for tok, a in zip(ids, attrs):
        if a.thread and tok not in (*v.pads, v.async_open, v.async_close):
            by_thread.setdefault(a.thread, []).append(tok)
    return [by_thread.get(t, []) for t in sorted({a.thread for a in attrs if a.thread})]


_WORDS = re.compile(r"[^\W\d_]+")


def degenerate_chunk(text: str) -> bool:
    """A chunk that keeps no promise: no content, no word of two letters (",,,,,,"), or one
    word making up more than half of two or more ("can can", "the the the cat")."""
    from solm.decode.compare import is_degenerate

    if is_degenerate(text):
        return True
    words = [w.lower() for w in _WORDS.findall(text)]
    return len(words) >= 2 and max(words.count(w) for w in set(words)) > len(words) / 2


def result_record(rt: PdiffRuntime, rec: Record, res: PdiffDecodeResult,
                  config: PdiffDecodeConfig) -> dict:
    tok, v = rt.tokenizer, rt.vocab
    shown = [t for t in res.ids if t not in v.pads]  # pads trimmed
    attrs, _, _ = walk_with_predictors(shown, v, PdiffTracker(v, config.length_scale))
    content = [t for t, a in zip(shown, attrs) if not a.is_tag]
    response = tok.decode(content, skip_special_tokens=True)
    annotated = tok.decode(shown, skip_special_tokens=True)
    chunks = [{"slots": c.slots, "pads": c.pads, "content_tokens": c.content_tokens,
               "steps": c.steps, "pad_only": c.pad_only} for c in res.chunks]
    contents = chunk_contents(res.ids, rt)
    repeats = [repeated_ngram_share(c, REPEAT_N) for c in contents]
    degenerate = sum(degenerate_chunk(tok.decode(c, skip_special_tokens=True))
                     for c in contents)
    return {
        "id": rec.id, "prompt": rec.prompt, "response": response, "annotated": annotated,
        "content_tokens": len(text_ids(tok, response)),
        "total_tokens": len(res.ids),
        "promises": len(res.chunks),
        # valid Pasta-Lang whose every chunk wrote what a promise is for
        "well_formed": not validate(annotated) and TOPIC_CAPPED not in res.flags
        and not degenerate,
        "degenerate_chunks": degenerate,
        "forward_passes": res.forward_passes, "plan_passes": res.plan_passes,
        "denoise_passes": res.denoise_passes, "join_passes": res.join_passes,
        # per denoising pass, the chunk slots it fed (and its committed tokens): slots fed
        # per committed token is what a denoising pass costs the engine
        "denoise_fed_slots": res.fed_slots, "denoise_committed": res.committed,
        "wall_s": round(res.wall_s, 4), "prefill_s": round(res.prefill_s, 4),
        "decode_s": round(res.decode_s, 4),
        "flags": res.flags, "ended": res.ended, "chunks": chunks,
        "pad_only_chunks": sum(c.pad_only for c in res.chunks),
        "chunk_repeated_ngrams": round(sum(repeats) / len(repeats), 4) if repeats else None,
        "steps_ratio": config.steps_ratio, "confidence_threshold": config.confidence_threshold,
        "length_scale": config.length_scale, "order": config.order,
    }


@dataclass
class PdiffDecodeSummary(DecodeSummary):
    content_tokens: int = 0
    forward_passes: int = 0
    chunks: int = 0
    pad_only_chunks: int = 0
    well_formed: int = 0
    wall_s: float = 0.0

    def add(self, row: dict, res: PdiffDecodeResult, runner, seconds: float) -> None:
        self.content_tokens += row["content_tokens"]
        self.forward_passes += res.forward_passes
        self.chunks += len(res.chunks)
        self.pad_only_chunks += row["pad_only_chunks"]
        self.well_formed += row["well_formed"]
        self.wall_s = seconds

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["well_formed_share"] = round(self.well_formed / self.done, 4) if self.done else None
        d["pad_only_share"] = round(self.pad_only_chunks / self.chunks, 4) if self.chunks \
            else None
        return d


class PdiffRunner:
    """Planned Diffusion over one KV pool, `rt.max_batch` prompts at a time. With batches, a
    row's `wall_s` counts the time its batch mates shared."""

    def __init__(self, rt: PdiffRuntime, config: PdiffDecodeConfig):
        self.rt, self.config = rt, config

    def run(self, jobs: Iterable[Job]) -> Iterator[Done]:
        return self.rt.run(PdiffRequest(job.rid, list(job.prompt_ids), self.config)
                           for job in jobs)

    def row(self, job: Job, res: PdiffDecodeResult) -> dict:
        row = result_record(self.rt, job.record, res, self.config)
        if self.rt.max_batch > 1:
            row["batched"] = self.rt.max_batch
        return row
