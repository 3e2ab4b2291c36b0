"""`pasta distill`: the model answers training prompts, and its own answers become SFT rows.

Everything goes into one folder, so a killed run loses only what was in flight and the same
command resumes:

- `answers.jsonl`: one row per prompt x answer, appended as each ends: answer 0 greedy (the
  model's own decoding defaults), answers 1..K sampled (seed + k), sequential decodes on the
  batched runtime, the answers of a prompt sharing its prefill; each row keeps the sampled
  token ids, whether the model ended it, the cap it ran under and the runtime's flags. A
  rerun with a larger `--max-new-tokens` continues the answers the old cap cut (prompt + their
  tokens prefilled, the repetition penalty counting them) and appends the longer row: the
  last row of an answer is the one read;
- `candidates.jsonl`: every answer judged by `solm.annotate.own_answers` (dropped and why, its
  speed-shaped annotation, its annotation-level gain), rebuilt from the answers on each run;
- `rows.jsonl`: the SFT mix (`pasta sft --data`; `--strip-annotations` gives Baseline-SFT
  the same rows without tags);
- `summary.json`: the counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from solm.annotate.own_answers import (DROP_REASONS, Candidate, OwnAnswerRules, judge_answer,
                                       own_mix)
from solm.core.errors import SolmError
from solm.core.jsonl import read_jsonl, write_jsonl
from solm.core.records import Record
from solm.core.sampling import SamplingConfig
from solm.core.stats import geomean

ANSWERS, CANDIDATES, ROWS, SUMMARY = ("answers.jsonl", "candidates.jsonl", "rows.jsonl",
                                      "summary.json")
RESULT_FILES = (ANSWERS, CANDIDATES, ROWS, SUMMARY)


@dataclass
class DistillConfig:
    sampled: int = 1  # sampled answers per prompt, beside the greedy one
    greedy: SamplingConfig = field(default_factory=SamplingConfig)
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.7))
    max_new_tokens: int = 512
    rules: OwnAnswerRules = field(default_factory=OwnAnswerRules)

    @property
    def answers_per_prompt(self) -> int:
        return 1 + self.sampled


class AnswerRunner:
    """Sequential decodes on the batched PASTA runtime: answer 0 of a prompt greedy, answer k
    sampled with seed + k; a prompt's answers share its prefill (one group) where the engine's
    step shares cells between requests."""

    def __init__(self, runtime, cfg: DistillConfig, seed: int):
        from solm.decode.pasta.config import PastaDecodeConfig

        self.runtime, self.seed = runtime, seed
        self.share_prompts = getattr(runtime.forward, "shares_prompts", True)
        self.configs = [PastaDecodeConfig(mode="sequential", max_new_tokens=cfg.max_new_tokens,
                                          sampling=cfg.greedy)]
        self.configs += [PastaDecodeConfig(mode="sequential", max_new_tokens=cfg.max_new_tokens,
                                           sampling=replace(cfg.sampling, seed=seed + k))
                         for k in range(1, cfg.answers_per_prompt)]

        self.max_new_tokens = cfg.max_new_tokens
        self.written: dict[int, list[int]] = {}  # rid -> the cut answer a job continues

    def run(self, jobs):
        return self.runtime.run(self.request(job) for job in jobs)

    def request(self, job):
        from solm.decode.pasta.batched import BatchRequest

        written = self.written.get(job.rid)
        if written is None:
            return BatchRequest(job.rid, list(job.prompt_ids), self.configs[job.sample],
                                group=job.record.id if self.share_prompts else None)
        config = replace(self.configs[job.sample],
                         max_new_tokens=self.max_new_tokens - len(written))
        return BatchRequest(job.rid, [*job.prompt_ids, *written], config,
                            chooser=self.runtime.chooser(config, written))

    def row(self, job, res) -> dict:
        written = self.written.pop(job.rid, [])
        ids = [*written, *res.ids]
        row = {"id": job.record.id, "sample": job.sample,
               "seed": self.seed + job.sample if job.sample else None,
               "response": self.runtime.tokenizer.decode(ids, skip_special_tokens=True),
               "ids": ids, "ended": res.ended, "max_new_tokens": self.max_new_tokens,
               "flags": res.flags}
        if written:
            row["continued_from"] = len(written)
        return row


def decode_answers(runtime, records: Sequence[Record], folder: Path, cfg: DistillConfig,
                   seed: int, cut: Sequence[tuple[Record, int, list[int]]],
                   on_done: Callable[[], None] | None = None) -> int:
    """The answers `answers.jsonl` lacks, decoded and appended, then the `cut` ones
    (`cut_answers`: an earlier, smaller cap cut them) continued to `cfg.max_new_tokens`;
    returns how many rows were written."""
    from solm.core.chat import prompt_ids
    from solm.decode.jobs import DecodeSummary, check_refusals, decode_jobs, decode_records
    from solm.decode.protocol import Job

    runner = AnswerRunner(runtime, cfg, seed)
    on_row = (lambda s, row: on_done()) if on_done else None
    summary = decode_records(runner, records, folder / ANSWERS, runtime.tokenizer, runner.row,
                             DecodeSummary(), samples=cfg.answers_per_prompt, per_sample=True,
                             on_row=on_row)
    jobs = []
    for rec, sample, written in cut:
        job = Job(len(jobs), rec, tuple(prompt_ids(runtime.tokenizer, rec.prompt, rec.system)),
                  sample)
        runner.written[job.rid] = written
        jobs.append(job)
    decode_jobs(runner, jobs, folder / ANSWERS, runner.row, summary, on_row)
    check_refusals(summary, str(folder / ANSWERS))
    return summary.done


def latest_answers(folder: Path) -> dict[tuple[str, int], dict]:
    """(id, sample) -> the last row `answers.jsonl` holds for it (a continued answer's)."""
    return {(str(r["id"]), int(r["sample"])): r
            for r in read_jsonl(folder / ANSWERS, skip_partial_last_line=True)}


def cut_answers(folder: Path, records: Sequence[Record], cfg: DistillConfig
                ) -> list[tuple[Record, int, list[int]]]:
    """The answers (record, sample, their ids) that did not end and are shorter than
    `cfg.max_new_tokens`: an earlier run's smaller cap cut them. Refuses a cap below an answer
    already written (those rows would not be what this cap decodes)."""
    if not (folder / ANSWERS).exists():
        return []
    latest = latest_answers(folder)
    longest = max((len(r["ids"]) for r in latest.values()), default=0)
    if longest > cfg.max_new_tokens:
        raise SolmError(f"{folder / ANSWERS}: holds answers of up to {longest} tokens; "
                        f"--max-new-tokens {cfg.max_new_tokens} would mix caps (raise it, or "
                        "--restart)")
    out = []
    for rec in records:
        for k in range(cfg.answers_per_prompt):
            row = latest.get((str(rec.id), k))
            if row is not None and not row["ended"] and len(row["ids"]) < cfg.max_new_tokens:
                out.append((rec, k, [int(t) for t in row["ids"]]))
    return out


def read_answers(folder: Path, records: Sequence[Record], per_prompt: int
                 ) -> dict[str, list[dict]]:
    """id -> its answers in sample order (only prompts with every answer decoded)."""
    done = latest_answers(folder)
    out = {}
    for rec in records:
        answers = [done.get((str(rec.id), k)) for k in range(per_prompt)]
        if all(a is not None for a in answers):
            out[str(rec.id)] = answers
    return out


def answer_judge(tokenizer, rules: OwnAnswerRules) -> Callable[[dict], Candidate]:
    """answer row -> Candidate, with `tokenizer` (a PASTA model's: control tokens added)."""
    from solm.annotate.gain import tokenizer_gain_meter
    from solm.annotate.rules import RuleShape, annotate_rules
    from solm.core.chat import text_ids
    from solm.core.systems.pasta import PastaVocab, content_ids

    vocab = PastaVocab.from_tokenizer(tokenizer)
    shape = RuleShape.speed(paragraphs_together=rules.paragraphs_together)
    gain_of = tokenizer_gain_meter(tokenizer)

    def count(text: str) -> int:
        return len(text_ids(tokenizer, text))

    def annotate(text: str) -> tuple[str, int]:
        return annotate_rules(text, count, shape=shape, gain_of=gain_of)

    def training_content(text: str) -> list[int]:
        return content_ids(text_ids(tokenizer, text), vocab)

    return lambda answer: judge_answer(answer, rules, annotate, training_content, gain_of)


@dataclass
class DistillSummary:
    prompts: int = 0
    excluded: int = 0  # prompts left out: they are evaluation prompts
    answers: int = 0
    answers_decoded_now: int = 0
    answers_left: int = 0  # not decoded yet (`--rows-only`): new, or cut by a smaller cap
    dropped: dict[str, int] = field(default_factory=dict)
    annotated_answers: int = 0  # answers whose speed-shaped annotation held
    parallel_rows: int = 0
    plain_rows: int = 0
    plain_offered: int = 0
    plain_share: float = 0.0
    geomean_gain_parallel: float | None = None
    mean_promises_parallel: float | None = None
    chosen_sampled: int = 0  # parallel rows taken from a sampled (not the greedy) answer
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def build_rows(folder: Path, records: Sequence[Record], answers: dict[str, list[dict]],
               judge: Callable[[dict], Candidate], rules: OwnAnswerRules,
               summary: DistillSummary) -> list[dict]:
    """Judge every answer (candidates.jsonl), choose the mix (rows.jsonl); both rewritten."""
    by_prompt, judged_rows = [], []
    for rec in records:
        if str(rec.id) not in answers:
            continue
        judged = [judge(a) for a in answers[str(rec.id)]]
        for c in judged:
            judged_rows.append(c.to_dict())
            summary.answers += 1
            if c.dropped:
                summary.dropped[c.dropped] = summary.dropped.get(c.dropped, 0) + 1
            summary.annotated_answers += c.annotated is not None
        by_prompt.append(judged)
    write_jsonl(folder / CANDIDATES, judged_rows)
    mix = own_mix(by_prompt, rules)
    prompts = {str(r.id): {"prompt": r.prompt, "system": r.system} for r in records}
    rows = mix.rows(prompts)
    write_jsonl(folder / ROWS, rows)
    summary.dropped = {k: summary.dropped.get(k, 0) for k in DROP_REASONS}
    summary.parallel_rows, summary.plain_rows = len(mix.parallel), len(mix.plain)
    summary.plain_offered = mix.plain_offered
    summary.plain_share = round(len(mix.plain) / len(rows), 4) if rows else 0.0
    if mix.parallel:
        summary.geomean_gain_parallel = round(geomean([c.gain for c in mix.parallel]), 4)
        summary.mean_promises_parallel = round(
            sum(c.promises for c in mix.parallel) / len(mix.parallel), 3)
    summary.chosen_sampled = sum(c.sample > 0 for c in mix.parallel)
    return rows


# what to change for each reason an answer was dropped, as `pasta distill` says it
DROP_ADVICE = {"cut": "raise --max-new-tokens (the cap cut them)",
               "empty": "check the prompts (empty answers)",
               "repeating": "sample with a repetition penalty or lower --temperature",
               "unfaithful": "use a model whose tokenizer round-trips its own answers"}


def distill_verdict(summary: DistillSummary) -> tuple[str, bool]:
    """(the last line `pasta distill` prints: rows made, answers dropped by reason, plain
    answers left out of the mix, what to change; whether the result is empty)."""
    dropped = {k: v for k, v in summary.dropped.items() if v}
    said = ", ".join(f"{v} {k}" for k, v in dropped.items()) or "none"
    rows = summary.parallel_rows + summary.plain_rows
    line = (f"{rows} rows ({summary.parallel_rows} parallel, {summary.plain_rows} plain) from "
            f"{summary.answers} answers; dropped: {said}")
    unused = summary.plain_offered - summary.plain_rows
    if unused:
        line += (f"; {unused} plain answers left out (plain rows are --plain-share of the "
                 f"mix, and there are {summary.parallel_rows} parallel rows)")
    if rows == 0:
        advice = [DROP_ADVICE[k] for k in sorted(dropped, key=lambda k: -dropped[k])]
        if summary.annotated_answers == 0 and summary.answers > sum(dropped.values()):
            advice.append("no eligible answer held a fork that pays: more prompts or "
                          "--sampled answers, or a lower --min-gain")
        elif summary.annotated_answers:
            advice.append("lower --min-gain")
        line += "; nothing to train on: " + ("; ".join(advice) or "give more prompts")
    return line, rows == 0


def write_summary(folder: Path, summary: DistillSummary, extra: dict) -> dict:
    data = {**summary.to_dict(), **extra}
    (folder / SUMMARY).write_text(json.dumps(data, indent=2) + "\n")
    return data
