"""The resumable annotation job shared by every annotator: read, annotate, check, append."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from solm.annotate.rules import RuleShape, annotate_rules
from solm.core.jsonl import JsonlWriter, done_ids
from solm.core.pasta_lang import faithful, validate
from solm.core.records import Record


@dataclass
class AnnotateSummary:
    rows: int = 0
    skipped_done: int = 0
    annotated: int = 0
    unannotated: int = 0
    no_response: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    promises: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def unseen_records(records: Iterable[Record], seen: set, summary,
                   on_row: Callable | None = None) -> Iterator[Record]:
    """The records whose id no output holds yet, counting every row (`summary.rows`) and the
    ones skipped (`summary.skipped_done`); each yielded id joins `seen` once its row is
    handled, and `on_row(summary)` follows every row (a resumable job's progress)."""
    for rec in records:
        summary.rows += 1
        if rec.id in seen:
            summary.skipped_done += 1
        else:
            yield rec
            seen.add(rec.id)
        if on_row:
            on_row(summary)


def annotate_rules_job(records: Iterable[Record], output: Path, rejects: Path,
                       count_tokens: Callable[[str], int], min_chunk_tokens: int = 12,
                       on_row: Callable[[AnnotateSummary], None] | None = None,
                       shape: RuleShape | None = None,
                       gain_of: Callable[[str | None], float] | None = None) -> AnnotateSummary:
    """Annotate with the syntactic rules; appends to `output`, skips ids already there. With a
    `gain_of` meter each row carries its annotation-level `gain` (and the shape's
    forks_that_pay leaves groups that do not pay plain)."""
    shape = shape or RuleShape(min_chunk_tokens=min_chunk_tokens)
    summary = AnnotateSummary()
    seen = done_ids(output, rejects)
    with JsonlWriter(output) as out, JsonlWriter(rejects) as rej:
        for rec in unseen_records(records, seen, summary, on_row):
            if not rec.response:
                summary.no_response += 1
                rej.write({"id": rec.id, "reason": "no_response"})
                summary.rejected["no_response"] = summary.rejected.get("no_response", 0) + 1
                continue
            try:
                annotated, n = annotate_rules(rec.response, count_tokens, shape=shape,
                                              gain_of=gain_of)
                problems = validate(annotated) if n else []
            except Exception as e:  # one odd row must not stop a long job
                annotated, n, problems = rec.response, 0, [f"annotator error: {e!r}"]
            if problems or (n and not faithful(annotated, rec.response)):
                reason = "invalid" if problems else "unfaithful"
                summary.rejected[reason] = summary.rejected.get(reason, 0) + 1
                rej.write({"id": rec.id, "reason": reason, "detail": problems[:1]})
            else:
                row = {"id": rec.id, "prompt": rec.prompt, "system": rec.system,
                       "response": rec.response, "annotated": annotated if n else None,
                       "promises": n, "annotator": "rules"}
                if gain_of is not None:
                    row["gain"] = round(gain_of(annotated if n else None), 4)
                out.write(row)
                summary.promises += n
                if n:
                    summary.annotated += 1
                else:
                    summary.unannotated += 1
    return summary
