"""`pasta eval run`: decode AlpacaEval's instructions with every method, judge each against the
baseline (and a reference, when given), and summarise speed and quality.

A run folder holds:
- `run.json`: the methods, the baseline, the judge, the decode settings, the machine;
- `outputs/LABEL.jsonl`: one row per prompt (AlpacaEval's `instruction` / `output` /
  `generator`, plus tokens, critical path, forward passes, wall time, flags);
- `judgments/LABEL.jsonl`: LABEL (output_2) against the baseline (output_1), and
  `judgments/LABEL__vs__reference.jsonl` against the reference outputs;
- `summary.json`: per method, the speed and quality figures.

Every step resumes: prompts already in an outputs file are skipped per method, judged pairs
are skipped by `pasta judge`'s machinery (and verdicts come from its cache).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterable

from solm.core.errors import SolmError
from solm.core.jsonl import JsonlWriter, done_ids, read_json_file, read_jsonl
from solm.core.records import Record
from solm.decode.jobs import DecodeSummary, check_refusals, decode_jobs, pending_jobs
from solm.eval.methods import Method, MethodRunner

REFERENCE = "reference"


def outputs_path(run_dir: Path, label: str) -> Path:
    return Path(run_dir) / "outputs" / f"{label}.jsonl"


def judgments_path(run_dir: Path, label: str, against: str | None = None) -> Path:
    suffix = f"__vs__{against}" if against else ""
    return Path(run_dir) / "judgments" / f"{label}{suffix}.jsonl"


def _shared(name: str, value, other):
    """A setting as a rerun must repeat it: per-method entries (`decode`'s `by_method`, the
    `engines` by label) only for the methods both runs name (a method added to a run brings
    its own, one left out keeps its record)."""
    if not isinstance(value, dict) or not isinstance(other, dict):
        return value
    if name == "engines":
        return {k: v for k, v in value.items() if k in other}
    if "by_method" not in value:
        return value
    both = other.get("by_method", {})
    return {**value, "by_method": {k: v for k, v in value["by_method"].items() if k in both}}


def write_run_file(run_dir: Path, methods: list[Method], baseline: str, settings: dict) -> None:
    """Record what the run is; a rerun into the same folder must ask for the same methods."""
    path = Path(run_dir) / "run.json"
    record = {"methods": [asdict(m) for m in methods], "baseline": baseline, **settings}
    if path.exists():
        old = read_json_file(path, "run file")
        old_methods = {m["label"]: m for m in old.get("methods", [])}
        for m in methods:
            if m.label in old_methods and old_methods[m.label] != asdict(m):
                raise SolmError(f"{run_dir}: method '{m.label}' was {old_methods[m.label]} in "
                                f"this run; use another label or another run folder")
        # outputs are reused by prompt id and judgments by pair: the prompts file, the
        # judge and the reference must be the run's own (a run decoded with --no-judge
        # records none, and takes the first judge it is given)
        for name in ("decode", "baseline", "prompts", "judge", "reference", "engines"):
            if old.get(name) is not None and record.get(name) is not None \
                    and _shared(name, old[name], record[name]) != \
                    _shared(name, record[name], old[name]):
                raise SolmError(f"{run_dir}: its {name} settings were {old.get(name)}; now "
                                f"{record.get(name)}: use another run folder")
            if isinstance(old.get(name), dict) and isinstance(record.get(name), dict):
                # a method added: its settings join the record
                if name == "engines":
                    record[name] = {**old[name], **record[name]}
                elif "by_method" in old[name]:
                    record[name]["by_method"] = {**old[name]["by_method"],
                                                 **record[name].get("by_method", {})}
        merged = {**old_methods, **{m.label: asdict(m) for m in methods}}
        record["methods"] = list(merged.values())
        for name in ("judge", "reference"):  # a --no-judge rerun keeps what is recorded
            if record.get(name) is None and old.get(name) is not None:
                record[name] = old[name]
        for name in old.keys() - record.keys():  # recorded later in the run (`engines`)
            record[name] = old[name]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))


def read_run_file(run_dir: Path) -> dict:
    path = Path(run_dir) / "run.json"
    if not path.exists():
        raise SolmError(f"{run_dir}: not a run folder (no run.json); make one with "
                        f"`pasta eval run`")
    return read_json_file(path, "run file")


def decode_outputs(runners: dict[str, MethodRunner], records: list[tuple[int, Record]],
                   run_dir: Path, repeats: int,
                   on_row: Callable[[str, dict | None], None] | None = None,
                   batch_size: int = 1) -> dict[str, int]:
    """Decode every (prompt, method) not yet in the outputs files through the one decode loop
    (`solm.decode.jobs`), prompt by prompt with the methods side by side (so a slow spell of
    the machine hits every method alike), every method warmed before the first timed decode
    and their order reversed on every other prompt (neither always runs first, on a cache the
    other warmed); with `batch_size` > 1, method by method in batches (untimed rows: a
    quality run)."""
    index = {rec.id: i for i, rec in records}
    pending = {}
    for label, runner in runners.items():
        jobs, _ = pending_jobs([rec for _, rec in records], runner.tokenizer,
                               done_ids(outputs_path(run_dir, label)))
        pending[label] = jobs
    summaries = {label: DecodeSummary() for label in runners}

    def written(label: str):
        return (lambda _summary, row: on_row(label, row)) if on_row else None

    if batch_size > 1:
        for label, runner in runners.items():
            for _ in range(len(records) - len(pending[label])):
                if on_row:
                    on_row(label, None)
            batched, row = runner.batched(index, batch_size)
            with JsonlWriter(outputs_path(run_dir, label), fsync=False) as writer:
                decode_jobs(batched, pending[label], writer, row, summaries[label],
                            written(label))
        _check_refusals(summaries, run_dir)
        return {label: s.done for label, s in summaries.items()}

    by_id = {label: {job.record.id: job for job in jobs} for label, jobs in pending.items()}
    timed = {label: runner.timed(index, repeats) for label, runner in runners.items()}
    for label, runner in runners.items():
        if pending[label]:
            runner.warm_up()
    writers = {label: JsonlWriter(outputs_path(run_dir, label), fsync=False)
               for label in runners}
    try:
        for position, (_, rec) in enumerate(records):
            order = list(runners)
            if position % 2:
                order.reverse()
            for label in order:
                job = by_id[label].get(rec.id)
                if job is None:
                    if on_row:
                        on_row(label, None)
                    continue
                decode_jobs(timed[label], [job], writers[label], _the_row, summaries[label],
                            written(label))
    finally:
        for w in writers.values():
            w.close()
    _check_refusals(summaries, run_dir)
    return {label: s.done for label, s in summaries.items()}


def _check_refusals(summaries: dict[str, DecodeSummary], run_dir: Path) -> None:
    for label, summary in summaries.items():
        check_refusals(summary, str(outputs_path(run_dir, label)))


def _the_row(job, row: dict) -> dict:
    return row


ALPACA_EVAL_HUB = "tatsu-lab/alpaca_eval"


def alpaca_eval_records(source: str, limit: int | None, skip: int = 0
                        ) -> list[tuple[int, Record]]:
    """(index in the set, record) for AlpacaEval's instructions: a local JSONL or JSON list
    with `instruction`, or `tatsu-lab/alpaca_eval` (its `alpaca_eval.json` from the hub).
    `skip` leaves out the first N (before `limit`), so `--limit 30` and `--skip 30` never
    share a prompt."""
    if skip:
        return alpaca_eval_records(source, limit + skip if limit else None)[skip:]
    from solm.core.records import load_records, record_from_dict

    if source == ALPACA_EVAL_HUB and not Path(source).exists():
        try:
            from huggingface_hub import hf_hub_download
            source = hf_hub_download(ALPACA_EVAL_HUB, "alpaca_eval.json", repo_type="dataset")
        except Exception as e:  # offline, no hub
            raise SolmError(f"could not download AlpacaEval's instructions from the hub "
                            f"({type(e).__name__}); pass a local file with --prompts (a JSONL "
                            f"or JSON list with an `instruction` field)") from None
    path = Path(source)
    if path.suffix == ".json" and path.exists():
        from solm.core.errors import DataError
        from solm.core.jsonl import read_rows_located

        located = read_rows_located(path)
        recs = []
        for i, (where, row) in enumerate(located[:limit] if limit else located):
            try:
                recs.append(record_from_dict(row, f"{path.stem}-{i}"))
            except (ValueError, TypeError, AttributeError) as e:
                raise DataError(str(e), path=where) from None
    else:
        recs = list(load_records(source, limit=limit))
    return list(enumerate(recs))


def judge_outputs(run_dir: Path, labels: Iterable[str], baseline: str, judge: str,
                  judge_options: dict, reference: Path | None,
                  on_update: Callable | None = None) -> dict[str, dict]:
    """Judge every method against the baseline (and every method, baseline included, against
    the reference outputs). Returns the judge summaries by judgments file name."""
    import asyncio

    from solm.core.llm import make_client
    from solm.core.models import cache_root
    from solm.judge.cache import VerdictCache
    from solm.judge.job import JudgeConfig, judge_pairs
    from solm.judge.pairs import make_pairs, read_outputs

    opts = dict(judge_options)
    cache = VerdictCache(opts.pop("cache_dir", None) or cache_root() / "judge")
    client_opts = {k: opts.pop(k) for k in ("timeout", "base_url") if k in opts}
    jobs = []
    base_rows = read_outputs(outputs_path(run_dir, baseline))
    ref_rows = read_outputs(reference) if reference is not None else None
    for label in labels:
        rows = read_outputs(outputs_path(run_dir, label))
        if label != baseline:
            jobs.append((judgments_path(run_dir, label), make_pairs(base_rows, rows)))
        if ref_rows is not None:
            jobs.append((judgments_path(run_dir, label, REFERENCE), make_pairs(ref_rows, rows)))

    async def judge_all() -> dict[str, dict]:
        # one client (a local judge loads its model once) and one cache for every job
        client = make_client(judge, batch_size=opts.get("concurrency", 8), **client_opts)
        summaries = {}
        try:
            for path, pairs in jobs:
                rejects = path.with_name(path.stem + ".rejects.jsonl")
                summary = await judge_pairs(pairs, client, path, rejects, JudgeConfig(**opts),
                                            cache, on_update=on_update)
                summaries[path.name] = summary.to_dict()
        finally:
            await client.aclose()
        return summaries

    return asyncio.run(judge_all())


def load_outputs(run_dir: Path, label: str) -> dict[str, dict]:
    path = outputs_path(run_dir, label)
    return {r["id"]: r for r in read_jsonl(path)} if path.exists() else {}
