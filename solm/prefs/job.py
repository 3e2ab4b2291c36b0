"""`pasta prefs`: sample N answers per prompt, score them, write best-against-worst pairs.

Everything goes into one folder, each file appended as work finishes, so a killed run loses
only what was in flight and the same command resumes:

- `baseline.jsonl`: the Baseline-SFT answer per prompt (generated greedily here, unless a
  file of them is given): the speed yardstick, and a quality reference;
- `samples.jsonl`: one row per prompt × sample (token ids in training order, the tokens the
  runtime forced, whether the model ended it, flags, text, critical path), decoded with the
  batched runtime, the samples of one prompt sharing its prefill;
- `judgments.jsonl` (+ `.rejects.jsonl`): each distinct sample against each reference (the
  Baseline-SFT answer and the dataset's answer), both orders, through the judge's on-disk
  verdict cache, so no comparison is asked twice; skipped when λ = 0;
- `scored.jsonl`: every sample with its speedup, quality and score (for analysis);
- `pairs.jsonl`: the pairs `pasta bonbon` trains on; `summary.json`: the counts.
"""

from __future__ import annotations

import json
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

from solm.core.chat import text_ids
from solm.core.jsonl import JsonlWriter, read_jsonl
from solm.core.records import Record
from solm.core.sampling import SamplingConfig
from solm.prefs.score import Scored, choose_pair, content_terms, distinct, score_value

BASELINE = "baseline"
DATASET = "dataset"


@dataclass
class PrefsConfig:
    samples: int = 10
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=1.0))
    baseline_sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = 512
    quality_weight: float = 1.0
    min_length_ratio: float = 0.0  # a sample shorter than this x the baseline answer: not chosen
    speed: str = "baseline"  # speedup over the Baseline-SFT answer, or "own": over its own text
    score: str = "thesis"  # or "content" (`solm.prefs.score`): passes saved, content, repeats
    repeat_weight: float = 1.0  # μ of the content score
    guard_weight: float = 1.0  # ν of the content score: the share of blocks a guard closed
    batch_size: int = 16
    pool_per_request: int = 2048
    model: str | None = None  # the sampled model, named in every pair (BoNBoN's reference)


@dataclass
class PrefsSummary:
    prompts: int = 0
    samples: int = 0
    samples_decoded_now: int = 0
    distinct_mean: float = 0.0
    well_formed_rate: float = 0.0
    pairs: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    judged: int = 0
    judge_rejected: int = 0
    judge_cache_hits: int = 0
    unjudged_samples: int = 0  # every comparison rejected: quality taken as a tie (0.5)
    chosen_mean_speedup: float = 0.0
    rejected_mean_speedup: float = 0.0
    chosen_mean_quality: float | None = None
    rejected_mean_quality: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _done(path: Path, key: Callable[[dict], object]) -> dict:
    return {key(r): r for r in read_jsonl(path, skip_partial_last_line=True)} \
        if path.exists() else {}


def given_baseline(tokenizer, records: Sequence[Record], given: dict[str, str],
                   source: str) -> dict[str, dict]:
    """id -> {response, tokens} from a file of Baseline-SFT answers (id -> text)."""
    from solm.core.errors import SolmError

    missing = [r.id for r in records if r.id not in given]
    if missing:
        raise SolmError(f"{source}: no Baseline-SFT answer for {len(missing)} prompt(s), "
                        f"e.g. id {missing[0]!r}")
    return {r.id: {"response": given[r.id], "tokens": len(text_ids(tokenizer, given[r.id]))}
            for r in records}


class SampleRunner:
    """The batched PASTA runtime on prefs' jobs: sample k of a prompt is seeded seed + k, and
    the samples of one prompt share its prefill (a group); the baseline's jobs decode
    sequentially, one per prompt."""

    def __init__(self, runtime, config, seed: int | None = None):
        self.runtime, self.config, self.seed = runtime, config, seed

    def run(self, jobs):
        from solm.decode.pasta.batched import BatchRequest

        def requests():
            for job in jobs:
                config = self.config
                if self.seed is not None:
                    config = replace(config, sampling=replace(config.sampling,
                                                              seed=self.seed + job.sample))
                yield BatchRequest(job.rid, list(job.prompt_ids), config,
                                   group=job.record.id if self.seed is not None else None)
        return self.runtime.run(requests())

    def row(self, job, res) -> dict:
        from solm.decode.pasta.decode_file import result_record

        row = result_record(self.runtime, job.record, res, self.config.mode)
        if self.seed is not None:
            row.update(sample=job.sample, seed=self.seed + job.sample, ids=res.ids,
                       forced=res.forced, ended=res.ended)
        return row


def _decode(runner, records: Sequence[Record], path: Path, samples: int,
            on_done: Callable[[], None] | None) -> int:
    """The rows `path` lacks, decoded through the one resumable loop; returns how many."""
    from solm.decode.jobs import DecodeSummary, check_refusals, decode_records

    summary = decode_records(runner, records, path, runner.runtime.tokenizer, runner.row,
                             DecodeSummary(), samples=samples, per_sample=samples > 1 or
                             runner.seed is not None,
                             on_row=(lambda s, row: on_done()) if on_done else None)
    check_refusals(summary, str(path))
    return summary.done


def baseline_answers(runtime, records: Sequence[Record], folder: Path, cfg: PrefsConfig,
                     on_done: Callable[[], None] | None = None) -> dict[str, dict]:
    """id -> {response, tokens}: each prompt decoded sequentially (greedy by default) with
    `runtime` (the Baseline-SFT model's batched runtime), kept in baseline.jsonl."""
    from solm.decode.pasta.runtime import PastaDecodeConfig

    path = folder / "baseline.jsonl"
    config = PastaDecodeConfig(mode="sequential", max_new_tokens=cfg.max_new_tokens,
                               sampling=cfg.baseline_sampling)
    _decode(SampleRunner(runtime, config), records, path, 1, on_done)
    done = _done(path, lambda r: r["id"])
    # the answer's text tokenized, as a given file's answers are counted (and every
    # method's content tokens in `pasta eval`)
    return {i: {"response": r["response"], "tokens": r["content_tokens"]}
            for i, r in done.items()}


def sample_answers(runtime, records: Sequence[Record], folder: Path, cfg: PrefsConfig,
                   seed: int, on_done: Callable[[], None] | None = None
                   ) -> tuple[dict[str, list[dict]], int]:
    """id -> its samples in order (k = 0 .. N-1), decoded where missing; sample k of every
    prompt is seeded `seed + k`."""
    from solm.decode.pasta.runtime import PastaDecodeConfig

    path = folder / "samples.jsonl"
    base = PastaDecodeConfig(mode="parallel", max_new_tokens=cfg.max_new_tokens,
                             sampling=cfg.sampling)
    decoded = _decode(SampleRunner(runtime, base, seed), records, path, cfg.samples, on_done)
    done = _done(path, lambda r: (r["id"], r["sample"]))
    return ({r.id: [done[(r.id, k)] for k in range(cfg.samples)] for r in records}, decoded)


def comparison_id(record_id: str, sample: int, reference: str) -> str:
    return f"{record_id}#s{sample}#vs-{reference}"


def judge_samples(client, judge_cfg, cache, records: Sequence[Record],
                  samples: dict[str, list[dict]], references: dict[str, dict[str, str]],
                  folder: Path, on_update=None):
    """Each distinct sample against each reference (the sample is output_2); returns
    (judgment rows by id, the judge's summary)."""
    from solm.judge.job import Pair, run_judge_job

    pairs = []
    for r in records:
        for first, _copies in distinct([s["ids"] for s in samples[r.id]]):
            text = samples[r.id][first]["response"]
            for name, ref in references[r.id].items():
                pairs.append(Pair(comparison_id(r.id, first, name), r.prompt, ref, text,
                                  generator_1=name, generator_2="sample"))
    output = folder / "judgments.jsonl"
    summary = run_judge_job(pairs, client, output, folder / "judgments.rejects.jsonl",
                            judge_cfg, cache, on_update=on_update)
    rows = {row["id"]: row for row in read_jsonl(output, skip_partial_last_line=True)}
    return rows, summary


def score_prompt(record: Record, samples: list[dict], baseline_tokens: int,
                 judgments: dict[str, dict] | None, references: Sequence[str],
                 quality_weight: float, vocab_well_formed: Callable[[dict], bool],
                 min_length_ratio: float = 0.0, speed: str = "baseline",
                 score: str = "thesis", repeat_weight: float = 1.0,
                 guard_weight: float = 0.0) -> tuple[list[Scored], list[dict]]:
    """The prompt's distinct samples as Scored, and a scored row per sample."""
    scored, rows = [], []
    groups = distinct([s["ids"] for s in samples])
    copies = dict(groups)
    for first, n_copies in groups:
        s = samples[first]
        # baseline: the Baseline-SFT answer's tokens / the critical path (the thesis'; grows
        # as the answer shrinks); own: the sample's own text tokens / its critical path (the
        # parallel speedup over decoding that text one token a step; length cannot raise it)
        numerator = s["content_tokens"] if speed == "own" else baseline_tokens
        speedup = numerator / max(1, s["critical_path"])
        quality, unjudged = None, False
        if judgments is not None:
            wins = [judgments[cid]["p_2"] for cid in
                    (comparison_id(record.id, first, name) for name in references)
                    if cid in judgments]
            # every comparison rejected by the judge: no information, scored as a tie
            quality, unjudged = (sum(wins) / len(wins), False) if wins else (0.5, True)
        penalty, theoretical = 0.0, speedup
        if score == "content":
            speedup, quality, penalty = content_terms(s["content_tokens"], s["critical_path"],
                                                      baseline_tokens, s["response"],
                                                      repeat_weight)
            penalty += guard_weight * guarded_share(s)
        scored.append(Scored(first, vocab_well_formed(s), speedup, quality, n_copies,
                             {"unjudged": unjudged, "theoretical": theoretical},
                             too_short=s["content_tokens"] < min_length_ratio * baseline_tokens,
                             penalty=penalty))
    by_first = {x.sample: x for x in scored}
    first_of = {}
    for k, s in enumerate(samples):
        key = tuple(s["ids"])
        first_of.setdefault(key, k)
        x = by_first[first_of[key]]
        rows.append({"id": record.id, "sample": k, "copy_of": first_of[key],
                     "copies": copies[first_of[key]], "well_formed": x.well_formed,
                     "too_short": x.too_short,
                     "theoretical_speedup": round(x.extra["theoretical"], 4),
                     **({"passes_saved": round(x.speedup, 4), "penalty": round(x.penalty, 4)}
                        if score == "content" else {}),
                     "realized_step_speedup": round(baseline_tokens
                                                    / max(1, s["forward_passes"]), 4),
                     "quality": None if x.quality is None else round(x.quality, 4),
                     "score": round(score_value(x, quality_weight), 4),
                     "critical_path": s["critical_path"], "total_tokens": s["total_tokens"],
                     "content_tokens": s["content_tokens"], "flags": s["flags"]})
    return scored, rows


def guarded_share(sample: dict) -> float:
    """The share of a sample's blocks a guard closed (promise overrun, repetition)."""
    promises = sample.get("promises", 0)
    return sample.get("guarded_blocks", 0) / promises if promises else 0.0


def pair_row(record: Record, samples: list[dict], choice, quality_weight: float,
             model: str | None = None) -> dict:
    def side(x: Scored) -> dict:
        s = samples[x.sample]
        return {"sample": x.sample, "ids": s["ids"], "forced": s["forced"],
                "ended": s["ended"], "text": s["annotated"], "response": s["response"],
                "well_formed": x.well_formed, "too_short": x.too_short,
                "speedup": round(x.speedup, 4),
                "quality": None if x.quality is None else round(x.quality, 4),
                "score": round(score_value(x, quality_weight), 4), "copies": x.copies}

    return {"id": record.id, "prompt": record.prompt, "system": record.system,
            "model": model, "n": choice.n, "quality_weight": "inf" if math.isinf(quality_weight)
            else quality_weight, "chosen": side(choice.chosen),
            "rejected": side(choice.rejected)}


def write_results(folder: Path, records: Sequence[Record], samples: dict[str, list[dict]],
                  baseline: dict[str, dict], judgments: dict[str, dict] | None,
                  references: dict[str, dict[str, str]], cfg: PrefsConfig,
                  well_formed: Callable[[dict], bool], summary: PrefsSummary) -> None:
    """scored.jsonl and pairs.jsonl, rewritten whole from what the folder holds (cheap, and
    always consistent with the samples and judgments on disk)."""
    chosen, rejected = [], []
    distinct_counts, wf = [], []
    scored_path, pairs_path = folder / "scored.jsonl", folder / "pairs.jsonl"
    tmp_scored, tmp_pairs = scored_path.with_suffix(".tmp"), pairs_path.with_suffix(".tmp")
    with JsonlWriter(tmp_scored) as scored_out, JsonlWriter(tmp_pairs) as pairs_out:
        for r in records:
            scored, rows = score_prompt(r, samples[r.id], baseline[r.id]["tokens"], judgments,
                                        list(references[r.id]), cfg.quality_weight,
                                        well_formed, cfg.min_length_ratio, cfg.speed,
                                        cfg.score, cfg.repeat_weight, cfg.guard_weight)
            summary.unjudged_samples += sum(1 for x in scored if x.extra.get("unjudged"))
            for row in rows:
                scored_out.write(row)
            distinct_counts.append(len(scored))
            wf += [row["well_formed"] for row in rows]
            choice = choose_pair(scored, cfg.quality_weight)
            if choice.skipped:
                summary.skipped[choice.skipped] = summary.skipped.get(choice.skipped, 0) + 1
                continue
            pairs_out.write(pair_row(r, samples[r.id], choice, cfg.quality_weight, cfg.model))
            chosen.append(choice.chosen)
            rejected.append(choice.rejected)
    tmp_scored.replace(scored_path)
    tmp_pairs.replace(pairs_path)
    summary.pairs = len(chosen)
    summary.distinct_mean = round(sum(distinct_counts) / max(1, len(distinct_counts)), 3)
    summary.well_formed_rate = round(sum(wf) / max(1, len(wf)), 4)
    if chosen:
        summary.chosen_mean_speedup = round(sum(x.speedup for x in chosen) / len(chosen), 4)
        summary.rejected_mean_speedup = round(sum(x.speedup for x in rejected)
                                              / len(rejected), 4)
        if judgments is not None:
            summary.chosen_mean_quality = round(sum(x.quality for x in chosen) / len(chosen), 4)
            summary.rejected_mean_quality = round(sum(x.quality for x in rejected)
                                                  / len(rejected), 4)


def write_summary(folder: Path, summary: PrefsSummary, extra: dict) -> dict:
    data = {**summary.to_dict(), **extra}
    (folder / "summary.json").write_text(json.dumps(data, indent=2) + "\n")
    return data


@contextmanager
def timed(summary: PrefsSummary, stage: str) -> Iterator[None]:
    """Adds the block's wall time to `summary.seconds[stage]`."""
    started = time.perf_counter()
    try:
        yield
    finally:
        summary.seconds[stage] = round(summary.seconds.get(stage, 0.0)
                                       + time.perf_counter() - started, 1)
