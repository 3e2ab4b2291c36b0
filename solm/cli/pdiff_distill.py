"""`pdiff distill`: Planned Diffusion rows whose chunks the model wrote itself (the job is
`solm.prefs.chunk_distill`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.cli.checks import check_paths
from solm.cli.console import info, out_console, progress
from solm.cli.flags import (ConfigOption, DebugOption, DeviceOption, DtypeOption, QuietOption,
                            RepetitionPenaltyOption, engine_option, gguf_type_option,
                            model_command, out_option)
from solm.cli.job_helpers import settings_from
from solm.cli.setting_options import setting_option
from solm.core.errors import SolmError
from solm.decode.pasta.config import PastaDecodeConfig

DISTILL_HELP = """Rewrite the chunks of Planned Diffusion's training rows with the model's own text.

The denoiser of a small model stays far behind its own autoregressive loss when it must
reproduce chunks another writer chose; its natural target is what the model itself writes for
a chunk given the plan. Per row of --data (Pasta-Lang annotated answers, as `pdiff sft
--data` reads): the row's main thread is forced token for token, and --writer (a PASTA model
on the same rows) writes every promised chunk as a thread of a parallel decode (greedy under
its decoding defaults, batched on the fastest engine). A row is dropped, with its reason in
decoded.jsonl and summary.json, when a chunk was closed by anything but the model, is empty, or
the cap cut the decode; each promise is rewritten to the exact length of its chunk; a row is
kept only when its text, tokenized again, gives back the decoded tokens exactly. Rows without
a promise pass through.

OUT (a folder) receives decoded.jsonl (every row, appended as decodes end: rerun after a
kill and it resumes), rows.jsonl (the rows kept, written when the run ends: train with
`pdiff sft --data OUT/rows.jsonl`) and summary.json.

Example: `pdiff distill --data recipes/own/rows_384.jsonl --writer pasta-sft-cpu -o runs/pdiff-self`
"""


@model_command
def distill(
    data: Path = typer.Option(..., "--data", "-d", help="Pasta-Lang annotated rows (prompt and "
                              "annotated), e.g. `pasta distill`'s rows.jsonl."),
    writer: str = typer.Option("pasta-sft-cpu", "--writer", "-m", help="The PASTA model that "
                               "writes the chunks (alias, folder or hub id): the "
                               "autoregressive model the Planned Diffusion model is trained "
                               "beside."),
    out: Path = out_option(..., help="Output folder (resumable)."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N rows."),
    max_new_tokens: int = setting_option(PastaDecodeConfig, "max_new_tokens", 1024,
                                         why="a plan and its chunks at their longest"),
    repetition_penalty: Optional[float] = RepetitionPenaltyOption,
    batch_size: Optional[int] = typer.Option(None, min=1, help="Rows decoded together "
                                             "(default: 16 on a CPU, 32 on CUDA)."),
    engine: str = engine_option("auto", why="the engine measured fastest here"),
    gguf_type: str = gguf_type_option(),
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.core.chat import prompt_ids
    from solm.core.generation import resolve_decode
    from solm.core.jsonl import JsonlWriter, read_jsonl
    from solm.core.models import default_device, load_tokenizer
    from solm.core.provenance import write_manifest
    from solm.core.records import Record
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.batched import default_batch_size
    from solm.decode.pasta.system import batched_on_engine
    from solm.prefs import chunk_distill as job
    from solm.train.data import load_sft_rows

    check_paths([data], [out / job.ROWS, out / job.DECODED, out / job.SUMMARY])
    rows = load_sft_rows(data, limit=limit)
    records = [Record(id=r["id"], prompt=r["prompt"], system=r["system"],
                      meta={"text": r["text"], "source_file": str(data)})
               for r in rows if r["tagged"]]
    plain = [r for r in rows if not r["tagged"]]
    if not records:
        raise SolmError(f"{data}: no row holds a Pasta-Lang promise: nothing to distill")
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, "pdiff distill", settings_from(locals()), inputs=[data], model=writer)
    have = {r.get("id") for r in read_jsonl(out / job.DECODED)} \
        if (out / job.DECODED).exists() else set()
    with JsonlWriter(out / job.DECODED) as w:  # plain rows pass through, once
        for r in plain:
            if r["id"] not in have:
                w.write({"id": r["id"], "prompt": r["prompt"], "system": r["system"],
                         "response": r["text"]})
    decoding = resolve_decode(writer, {"temperature": 0.0,
                                       "repetition_penalty": repetition_penalty})
    batch = batch_size or default_batch_size(device or default_device())
    tokenizer = load_tokenizer(writer)
    longest = max(len(prompt_ids(tokenizer, r.prompt, r.system)) for r in records)
    info(f"loading {writer} ...")
    rt, engine_used = batched_on_engine(writer, "parallel", engine, gguf_type, dtype, device,
                                        batch * (max_new_tokens + longest), batch)
    left = sum(1 for r in records if r.id not in have)
    with progress(f"writing chunks ({writer}, {engine_used})", left) as advance:
        decoded = job.distill_chunks(rt, records, out, max_new_tokens,
                                     SamplingConfig(**decoding.values), on_done=advance)
    job.write_training_rows(out)
    summary = job.tally(out, records, rt.tokenizer, rt.vocab, job.ChunkDistillSummary(
        rows_in=len(rows), plain=len(plain)))
    data_out = {**summary.to_dict(), "decoded_now": decoded, "writer": writer,
                "engine": engine_used, "decoding": decoding.describe()}
    (out / job.SUMMARY).write_text(json.dumps(data_out, indent=1) + "\n")
    write_manifest(out, "pdiff distill", settings_from(locals()), inputs=[data], model=writer,
                   extra={"summary": data_out})
    out_console.print_json(json.dumps(data_out))
    if not summary.kept:
        raise SolmError(f"{out / job.ROWS}: no row kept ({summary.dropped})")
    info(f"{summary.kept} of {len(records)} rows kept with the model's own chunks "
         f"({summary.chunk_tokens} chunk tokens, {summary.to_dict()['chunk_tokens_vs_original']}x "
         f"the original's); train with `pdiff sft --data {out / job.ROWS}`")
