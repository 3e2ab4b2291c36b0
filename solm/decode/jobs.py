"""The one resumable decode loop: a file of prompts in, one row per (prompt, sample) out.

It skips what the output already holds, feeds the rest to a runner (`solm.decode.protocol`),
writes each row as its request ends (appended and flushed, so a killed run loses only what
was in flight) and keeps the system's summary. Commands (`decode_command`), `pasta eval run`
(timed and batched), `tip eval run` and `pasta prefs` all decode through it; a system only
says what its row holds (`DecodeSystem.row`) and what its summary counts.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Iterator, Sequence

from solm.core.chat import check_prompt_fits, prompt_ids
from solm.core.errors import SolmError
from solm.core.notices import notice
from solm.core.jsonl import JsonlWriter, is_stdio, read_jsonl
from solm.core.records import Record
from solm.decode.protocol import Done, Job, Runner


@dataclass
class DecodeSummary:
    """What every decode job counts; a system's summary adds its own figures in `add`."""

    done: int = 0
    skipped: int = 0
    flagged: dict[str, int] = field(default_factory=dict)
    # prompts the runtime can never decode with these settings ({id, sample, reason}); not
    # written, so a rerun with settings that fit decodes them
    refused: list[dict] = field(default_factory=list)

    @classmethod
    def start(cls, config: Any) -> "DecodeSummary":
        """A fresh summary for a decode under `config`."""
        return cls()

    def count(self, row: dict) -> None:
        self.done += 1
        for f in row.get("flags", ()):
            self.flagged[f] = self.flagged.get(f, 0) + 1

    def add(self, row: dict, result: Any, runner: Runner, seconds: float) -> None:
        """A row was written (`seconds`: the job's wall time so far)."""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class PromptsRefused(SolmError):
    """A batch decode finished with some prompts it could not decode: the rows it wrote stay,
    the refused ids are in its manifest, and the command exits non-zero so a pipeline stops."""


def check_refusals(summary: DecodeSummary, where: str) -> None:
    """Raise `PromptsRefused` (one line: how many, which, why) when `summary` refused any."""
    refused = summary.refused
    if not refused:
        return
    ids = sorted({r["id"] for r in refused})
    shown = ", ".join(repr(i) for i in ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5
                                                   else "")
    reasons = sorted({r["reason"] for r in refused})
    raise PromptsRefused(
        f"{len(refused)} of {len(refused) + summary.done + summary.skipped} decodes refused "
        f"({shown}: {reasons[0]}{'; ...' if len(reasons) > 1 else ''}); the {summary.done} "
        f"answers written stay in {where}, the refused ids are in its manifest")


def row_key(row: dict, per_sample: bool) -> Hashable:
    return (str(row["id"]), int(row.get("sample", 0))) if per_sample else str(row["id"])


def done_keys(out: str | Path, per_sample: bool) -> set:
    """The (id) or (id, sample) keys an output already holds."""
    if is_stdio(out) or not Path(out).exists():
        return set()
    return {row_key(r, per_sample) for r in read_jsonl(out, skip_partial_last_line=True)
            if "id" in r}


def undone(records: Sequence[Record], out: str | Path, samples: int = 1,
           per_sample: bool = False) -> int:
    """How many (prompt, sample) decodes `out` does not hold yet (no tokenizer needed)."""
    done = done_keys(out, per_sample)
    return sum((str(r.id), k) not in done if per_sample else str(r.id) not in done
               for r in records for k in range(samples))


def check_prompts_fit(model: str, records: Sequence[Record]) -> None:
    """Refuse, before any weights load or any engine export, a prompt the model's context
    cannot hold with room to answer (the same rule `pending_jobs` applies once loaded)."""
    from solm.core.models import load_tokenizer, model_context_limit

    tokenizer = load_tokenizer(model)
    limit = model_context_limit(model)
    if limit is not None:
        tokenizer.model_max_length = min(limit, getattr(tokenizer, "model_max_length", limit)
                                         or limit)
    for rec in records:
        check_prompt_fits(tokenizer, prompt_ids(tokenizer, rec.prompt, rec.system), rec)


def pending_jobs(records: Sequence[Record], tokenizer, done: set, samples: int = 1,
                 per_sample: bool = False) -> tuple[list[Job], int]:
    """(the jobs not yet in the output, how many were skipped), in prompt then sample order."""
    jobs: list[Job] = []
    skipped = 0
    for rec in records:
        ids: tuple[int, ...] | None = None
        for k in range(samples):
            key = (str(rec.id), k) if per_sample else str(rec.id)
            if key in done:
                skipped += 1
                continue
            if ids is None:
                ids = tuple(prompt_ids(tokenizer, rec.prompt, rec.system))
                check_prompt_fits(tokenizer, ids, rec)
            jobs.append(Job(len(jobs), rec, ids, k))
    return jobs, skipped


def decode_jobs(runner: Runner, jobs: Iterable[Job], out: str | Path | JsonlWriter,
                row: Callable[[Job, Any], dict], summary: DecodeSummary,
                on_row: Callable[[DecodeSummary, dict], None] | None = None) -> DecodeSummary:
    """Run `jobs` through `runner`, appending `row(job, result)` to `out` as each ends (`out`:
    a path, or a writer the caller keeps open across calls)."""
    by_rid = {}

    def feed():
        for job in jobs:
            by_rid[job.rid] = job
            yield job

    started = time.perf_counter()
    with _writer(out) as writer:
        for done in runner.run(feed()):
            done: Done
            job = by_rid.pop(done.rid)
            if done.error:
                summary.refused.append({"id": str(job.record.id), "sample": job.sample,
                                        "reason": done.error})
                notice(f"prompt {job.record.id!r} refused, the others go on: {done.error}")
                continue
            record = row(job, done.result)
            writer.write(record)
            summary.count(record)
            summary.add(record, done.result, runner, time.perf_counter() - started)
            if on_row:
                on_row(summary, record)
    return summary


@contextmanager
def _writer(out: str | Path | JsonlWriter) -> Iterator[JsonlWriter]:
    if isinstance(out, JsonlWriter):
        yield out
        return
    with JsonlWriter(out) as writer:
        yield writer


def decode_records(runner: Runner, records: Sequence[Record], out: str | Path, tokenizer,
                   row: Callable[[Job, Any], dict], summary: DecodeSummary, samples: int = 1,
                   per_sample: bool = False,
                   on_row: Callable[[DecodeSummary, dict], None] | None = None
                   ) -> DecodeSummary:
    """Resume a decode file: skip the rows `out` holds, decode the rest."""
    jobs, summary.skipped = pending_jobs(records, tokenizer, done_keys(out, per_sample),
                                         samples, per_sample)
    return decode_jobs(runner, jobs, out, row, summary, on_row)
