"""The resumable TIP rules-annotation job: read, annotate, check, append.

Every row ends in exactly one of two files, one flushed line as soon as it is decided: the
output (accepted annotations) or the rejects file (with a reason), so a rerun of the same
command skips every id already in either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from solm.annotate.pipeline import unseen_records
from solm.annotate.tip_rules import NotAnnotatable, annotate_tip_rules, tip_faithful
from solm.core.jsonl import JsonlWriter, done_ids
from solm.core.records import Record


@dataclass
class TipAnnotateSummary:
    rows: int = 0
    skipped_done: int = 0
    annotated: int = 0
    reusing: int = 0  # annotated traces that reuse a register (a step is killed)
    steps: int = 0
    killed: int = 0
    forced: int = 0  # killed while a later step still referred back to them
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def reuse_share(self) -> float:
        return self.reusing / self.annotated if self.annotated else 0.0

    def to_dict(self) -> dict:
        return dict(self.__dict__, reuse_share=round(self.reuse_share, 4))


def annotate_tip_rules_job(records: Iterable[Record], output: Path, rejects: Path,
                           count_tokens: Callable[[str], int], registers: int,
                           min_step_tokens: int,
                           on_row: Callable[[TipAnnotateSummary], None] | None = None,
                           rule: str = "refers") -> TipAnnotateSummary:
    summary = TipAnnotateSummary()
    seen = done_ids(output, rejects)
    with JsonlWriter(output) as out, JsonlWriter(rejects) as rej:
        for rec in unseen_records(records, seen, summary, on_row):
            reason, detail = None, ""
            try:
                a = annotate_tip_rules(rec.response or "", count_tokens, registers,
                                       min_step_tokens, rule, rec.meta.get("needs"))
                if not tip_faithful(a.annotated, rec.response):
                    reason, detail = "unfaithful", "removing the registers changes the trace"
            except NotAnnotatable as e:
                reason, detail = e.reason, e.detail
            except Exception as e:  # one odd row must not stop a long job
                reason, detail = "annotator_error", repr(e)
            if reason:
                summary.rejected[reason] = summary.rejected.get(reason, 0) + 1
                rej.write({"id": rec.id, "reason": reason, "detail": detail[:500]})
            else:
                out.write({"id": rec.id, "prompt": rec.prompt, "system": rec.system,
                           "response": rec.response, "annotated": a.annotated,
                           "steps": a.steps, "registers": registers, "killed": a.killed,
                           "forced": a.forced, "registers_used": a.registers_used,
                           "annotator": "rules", "rule": rule, **rec.meta})
                summary.annotated += 1
                summary.reusing += a.reuses
                summary.steps += a.steps
                summary.killed += a.killed
                summary.forced += a.forced
    return summary
