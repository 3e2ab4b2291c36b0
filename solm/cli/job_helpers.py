"""What commands do around a job: their prompts (dedupe, shards), the LLM annotation runner,
manifest settings, the control tokens they show."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from solm.cli.console import console, info, out_console, progress, settled_counter
from solm.core.errors import SolmError


def sharded(spec: Optional[str], device: Optional[str], text_mode: bool = False):
    """(the Shard or None, the device this process decodes on) for a --shard value."""
    from solm.core.errors import SolmError
    from solm.core.shard import Shard

    shard = Shard.parse(spec)
    if shard is not None and text_mode:
        raise SolmError("--shard splits a prompts file; it does not apply to one prompt")
    return shard, (shard.device(device) if shard else device)


def folder_output(out: Path, part, command: str) -> Path:
    """The folder a folder-writing command fills (its shard's, under --shard); a file there
    is refused before anything loads."""
    if part is not None:
        out = part.folder(out)
    if out.exists() and not out.is_dir():
        raise SolmError(f"{out}: --out is a file, not an output folder ({command} writes a "
                        f"folder of files there)")
    return out


def take_shard(part, records: list, out: Path, folder: bool = False) -> list:
    """This process's prompts of a --shard; an empty shard still leaves its (empty) output,
    so `solm merge` finds every shard."""
    from solm.core.shard import mark_started

    if part is None:
        return records
    mine = part.take(records)
    info(f"{part.tag}: {len(mine)} of {len(records)} prompts -> {out}")
    # records, or (index, record) pairs (AlpacaEval's)
    mark_started(part, out, folder, [r.id if hasattr(r, "id") else r[1].id for r in mine])
    if not mine:
        if folder:
            Path(out).mkdir(parents=True, exist_ok=True)
        else:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).touch()
        finish_shard(part, out, folder)
    return mine


def finish_shard(part, out: Path, folder: bool = False) -> None:
    """A sharded command ended normally: its marker says so, and `solm merge` takes it."""
    from solm.core.shard import mark_finished

    mark_finished(part, out, folder)


def dedupe_list(dedupe: bool) -> list[str] | None:
    """The `duplicates` argument of `load_records` for a --dedupe flag."""
    return [] if dedupe else None


def annotation_records(input: str, split: str, limit: int | None, seed: int | None,
                       dedupe: bool) -> list:
    """The records an annotation job reads: the first N, or a seeded random N with --seed;
    refuses an input with none."""
    from solm.core.records import load_records, sample_records

    duplicates = dedupe_list(dedupe)
    if seed is not None and limit is not None:
        records = sample_records(load_records(input, split=split, duplicates=duplicates),
                                 limit, seed)
    else:
        records = list(load_records(input, split=split, limit=limit, duplicates=duplicates))
    report_duplicates(duplicates, input)
    if not records:
        raise SolmError(f"{input}: no rows to annotate; nothing was done")
    return records


def llm_annotation(records: list, annotator: str, output, rejects, count, cfg,
                   base_url: str | None, timeout: float, task=None):
    """Run the resumable LLM annotation job with a progress bar; returns its summary.
    `task` is what to ask (default: Pasta-Lang's)."""
    import asyncio

    from solm.annotate.llm_job import annotate_with_llm
    from solm.core.llm import make_client

    client = make_client(annotator, base_url=base_url, timeout=timeout,
                         batch_size=cfg.concurrency)
    with progress(f"annotating with {client.spec}", len(records)) as advance:
        counter = settled_counter(advance)

        def update(s):
            rejected = sum(s.rejected.values())
            counter(s.skipped_done + s.accepted + rejected,
                    f"accepted {s.accepted} rejected {rejected} retrying {s.retrying}")

        return asyncio.run(annotate_with_llm(records, client, output, rejects, count, cfg,
                                             on_update=update, task=task))


def report_duplicates(duplicates: list[str] | None, source: object) -> None:
    if duplicates:
        console.print(f"[yellow]warning:[/] --dedupe: {len(duplicates)} row(s) of {source} "
                      f"repeat an earlier id and were left out")


def settings_from(local_vars: dict[str, Any]) -> dict[str, Any]:
    """A command's settings for its manifest (paths as strings, no config/secret objects)."""
    simple = (str, int, float, bool, type(None), Path)
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in local_vars.items()
            if k not in ("config",) and not k.startswith("_") and isinstance(v, simple)}


def show_control_tokens(model: str, system: str, shown: list[str], num_registers: int = 16):
    """Add `system`'s control tokens to `model`'s tokenizer, print the `shown` ones with their
    ids, and return the tokenizer (the `tokens` command of every system app)."""
    from solm.core.vocabulary import add_control_tokens
    from solm.core.models import load_tokenizer

    tok = load_tokenizer(model)
    added = add_control_tokens(None, tok, system, num_registers=num_registers)
    out_console.print(f"{added} tokens added to {model}'s tokenizer ({len(tok)} total)")
    for t in shown:
        out_console.print(f"  {tok.convert_tokens_to_ids(t):>6}  {t}")
    return tok
