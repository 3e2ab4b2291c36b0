"""`pdiff distill`: Planned Diffusion rows whose chunks are what a model writes itself.

A 135M model's denoiser stays far behind its own autoregressive loss when it is asked to
reproduce text another writer chose; the natural target for a planned chunk is the text the
model writes autoregressively for that chunk given the plan (Medusa-2 and NPR train on the
model's own outputs the same way). Per training row:

- the row's main thread (plan, promises, `<sync/>`, continuation) is forced, token for
  token, and a PASTA model (`--writer`) writes every promised chunk as a thread of a
  parallel decode, greedily, on the batched runtime (the fastest engine that runs it);
- a chunk the model did not close itself (a guard or the cap closed it), an empty chunk,
  or a decode the cap cut drops the row, with the reason counted;
- each promise is rewritten to the exact length of what the model wrote
  (`rules.tens_for`: the smallest ten that holds it, the thesis's exact-length ablation);
- the row is kept only if its text, tokenized again as training will, gives back the
  decoded tokens exactly (a row that tokenizes otherwise would train on tokens the model
  never wrote).

Rows without a promise pass through as they are (they train the autoregressive loss only).
`decoded.jsonl` is appended as decodes end (dropped rows marked), so a killed run resumes
where it stopped; `rows.jsonl`, the rows kept, is written from it when a run ends.
"""

from __future__ import annotations

import json

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from solm.core.records import Record

from solm.decode.flags import (BLOCK_CUT, FORK_CAPPED, FORK_EOS, PROMISE_OVERRUN,
                               BLOCK_REPEATING)

# decoded.jsonl: every row as it ends, dropped ones marked with their reason (what a rerun
# skips); rows.jsonl: the rows `pdiff sft` trains on, rewritten from it at the end of a run
ROWS, DECODED, SUMMARY = "rows.jsonl", "decoded.jsonl", "summary.json"
# the runtime's flags of a block something other than the model closed
CLOSED_FOR_IT = frozenset({BLOCK_CUT, FORK_CAPPED, FORK_EOS, PROMISE_OVERRUN, BLOCK_REPEATING})
DROPS = ("not_closed_by_model", "empty_chunk", "cut_by_cap", "tokenizes_otherwise",
         "no_chunk_written")


@dataclass
class ChunkDistillSummary:
    rows_in: int = 0
    plain: int = 0  # rows without a promise, passed through
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {d: 0 for d in DROPS})
    chunks: int = 0
    chunk_tokens: int = 0
    original_chunk_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["dropped"] = dict(self.dropped)
        out["chunk_tokens_vs_original"] = round(self.chunk_tokens
                                                / max(self.original_chunk_tokens, 1), 4)
        return out


def exact_promises(ids: Sequence[int], vocab) -> list[int]:
    """Each promise's closing token rewritten to the exact length of the block after it
    (`tens_for` of its tokens between `<async>` and `</async>`)."""
    from solm.annotate.rules import tens_for
    from solm.core.systems.pasta import MAIN, walk_training_order

    ids = [int(t) for t in ids]
    attrs, _ = walk_training_order(ids, vocab)
    lengths: dict[int, int] = {}  # main order of a promise's closer -> its block's tokens
    for tok, a in zip(ids, attrs):
        if a.thread != MAIN and tok not in (vocab.async_open, vocab.async_close):
            lengths[a.anchor] = lengths.get(a.anchor, 0) + 1
        elif a.thread != MAIN:
            lengths.setdefault(a.anchor, 0)
    by_tens = {n: t for t, n in vocab.close_tens.items()}
    out = []
    for tok, a in zip(ids, attrs):
        if a.thread == MAIN and tok in vocab.close_tens and a.order in lengths:
            tok = by_tens[tens_for(lengths[a.order])]
        out.append(tok)
    return out


def chunk_row(record: Record, original: Sequence[int], written: Sequence[int], flags,
              tokenizer, vocab) -> tuple[dict | None, str | None]:
    """(the distilled row, None) or (None, why it is dropped): `written` is the decode's
    answer in training order (main forced to `original`'s, blocks the model's)."""
    from solm.core.chat import text_ids
    from solm.core.pasta_lang import strip
    from solm.core.systems.pasta import MAIN, walk_training_order
    from solm.decode.flags import MAX_NEW_TOKENS

    if MAX_NEW_TOKENS in flags:
        return None, "cut_by_cap"
    attrs, _ = walk_training_order(list(written), vocab)
    blocks: dict[int, list[int]] = {}
    for tok, a in zip(written, attrs):
        if a.thread != MAIN:
            blocks.setdefault(a.thread, []).append(int(tok))
    promised = sum(1 for t in original if t in vocab.close_tens)
    if len(blocks) < promised:
        return None, "no_chunk_written"
    if any(b[-1] != vocab.async_close for b in blocks.values()) or set(flags) & CLOSED_FOR_IT:
        return None, "not_closed_by_model"
    if any(len(b) <= 2 for b in blocks.values()):
        return None, "empty_chunk"
    ids = exact_promises(written, vocab)
    text = tokenizer.decode(ids, skip_special_tokens=False)
    if text_ids(tokenizer, text) != ids:
        return None, "tokenizes_otherwise"
    return {"id": record.id, "prompt": record.prompt, "system": record.system,
            "annotated": text, "response": strip(text),
            "distilled_from": record.meta.get("source_file")}, None


class ChunkRunner:
    """Parallel decodes on the batched PASTA runtime, each with its row's main thread forced
    and its blocks sampled (greedy) by the model."""

    def __init__(self, runtime, max_new_tokens: int, sampling=None):
        from solm.core.control_tokens import MAX_PROMISE_TENS
        from solm.core.sampling import SamplingConfig
        from solm.decode.pasta.config import PastaDecodeConfig

        self.runtime = runtime
        # the model's chunk as it writes it: no promise guard (the promise is rewritten to
        # it), only the largest chunk the slot layout holds (content, tags and one pad)
        self.config = PastaDecodeConfig(mode="parallel", max_new_tokens=max_new_tokens,
                                        sampling=sampling or SamplingConfig(temperature=0.0),
                                        keep_promises=False,
                                        max_fork_tokens=10 * MAX_PROMISE_TENS - 3)
        self.originals: dict[Any, list[int]] = {}

    def original(self, record: Record) -> list[int]:
        from solm.core.chat import text_ids

        return text_ids(self.runtime.tokenizer, record.meta["text"])

    def run(self, jobs):
        return self.runtime.run(self.request(job) for job in jobs)

    def request(self, job):
        from solm.core.systems.pasta import MAIN
        from solm.decode.pasta.batched import BatchRequest
        from solm.decode.pasta.runtime import replay_scripts

        ids = self.original(job.record)
        self.originals[job.rid] = ids
        streams, _ = replay_scripts(ids, self.runtime.vocab)
        return BatchRequest(job.rid, list(job.prompt_ids), self.config,
                            scripts={MAIN: streams[MAIN]}, sample_unscripted=True)


def distill_chunks(runtime, records: Sequence[Record], folder: Path, max_new_tokens: int,
                   sampling=None, on_done: Callable[[], None] | None = None) -> int:
    """Decode the rows `decoded.jsonl` lacks and append each (a dropped row is written with
    its reason, so a rerun skips it too); returns how many were decoded now."""
    from solm.decode.jobs import DecodeSummary, check_refusals, decode_records

    runner = ChunkRunner(runtime, max_new_tokens, sampling)
    vocab, tokenizer = runtime.vocab, runtime.tokenizer

    def row(job, res) -> dict:
        got, why = chunk_row(job.record, runner.originals.pop(job.rid), res.ids, res.flags,
                             tokenizer, vocab)
        return got if got is not None else {"id": job.record.id, "dropped": why}

    done = DecodeSummary()
    decode_records(runner, records, folder / DECODED, tokenizer, row, done,
                   on_row=(lambda s, r: on_done()) if on_done else None)
    check_refusals(done, str(folder / DECODED))
    return done.done


def tally(folder: Path, records: Sequence[Record], tokenizer, vocab,
          summary: ChunkDistillSummary) -> ChunkDistillSummary:
    """The summary's counts from `decoded.jsonl` and the input records."""
    from solm.core.chat import text_ids
    from solm.core.jsonl import read_jsonl
    from solm.core.systems.pasta import MAIN, walk_training_order

    def chunk_tokens(text: str) -> tuple[int, int]:
        ids = text_ids(tokenizer, text)
        attrs, _ = walk_training_order(ids, vocab)
        inner = [t for t, a in zip(ids, attrs) if a.thread != MAIN and not a.is_tag]
        return len({a.thread for a in attrs if a.thread != MAIN}), len(inner)

    by_id = {r.id: r for r in records}
    path = folder / DECODED
    for row in (read_jsonl(path) if path.exists() else []):
        if "dropped" in row:
            summary.dropped[row["dropped"]] = summary.dropped.get(row["dropped"], 0) + 1
            continue
        if row.get("id") not in by_id:  # a plain row passed through
            continue
        summary.kept += 1
        n, k = chunk_tokens(row["annotated"])
        summary.chunks += n
        summary.chunk_tokens += k
        summary.original_chunk_tokens += chunk_tokens(by_id[row["id"]].meta["text"])[1]
    return summary


def write_training_rows(folder: Path) -> int:
    """`rows.jsonl` from `decoded.jsonl`, the dropped rows left out (written whole, then
    moved into place: a file `pdiff sft` reads is never half written); returns its rows."""
    from solm.core.jsonl import read_jsonl

    kept = [row for row in read_jsonl(folder / DECODED) if "dropped" not in row]
    part = folder / (ROWS + ".part")
    part.write_text("".join(json.dumps(row) + "\n" for row in kept))
    part.replace(folder / ROWS)
    return len(kept)
