"""`solm cache`: what solm keeps in its cache folder, how large, and a way to empty it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.cli.console import handle_errors, info, out_console
from solm.cli.errors import command_group
from solm.cli.flags import ConfigOption, DebugOption, QuietOption

app = command_group("cache", "Show or empty solm's cache ($SOLM_CACHE, else ~/.cache/solm): "
                             "converted models (`models/`) and the GGUF exports the llama.cpp "
                             "engine makes on first use (`gguf/`).")

KINDS = {"models": "converted models (rebuilt from their source on next use)",
         "gguf": "GGUF exports for llama.cpp (exported again on next use)"}


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def cache_report() -> dict:
    """Per kind: the folder, its entries with their sizes, and the total (bytes)."""
    from solm.core.models import cache_root

    root = cache_root()
    out = {"root": str(root), "kinds": {}}
    for kind in KINDS:
        folder = root / kind
        entries = sorted(p for p in folder.iterdir() if not p.name.endswith(".lock")) \
            if folder.is_dir() else []
        sizes = {p.name: _size(p) for p in entries}
        out["kinds"][kind] = {"folder": str(folder), "entries": sizes,
                              "bytes": sum(sizes.values())}
    out["bytes"] = sum(k["bytes"] for k in out["kinds"].values())
    return out


@app.command()
@handle_errors
def show(config: Optional[Path] = ConfigOption, quiet: bool = QuietOption,
         debug: bool = DebugOption) -> None:
    """Every cached model and GGUF export with its size, and the totals (JSON on stdout)."""
    report = cache_report()
    for kind, what in KINDS.items():
        k = report["kinds"][kind]
        info(f"{kind}/ ({what}): {len(k['entries'])} entries, {k['bytes'] / 2**20:,.0f} MiB")
        for name, size in k["entries"].items():
            info(f"  {name}  {size / 2**20:,.1f} MiB")
    info(f"total {report['bytes'] / 2**20:,.0f} MiB in {report['root']}")
    out_console.print_json(json.dumps(report))


@app.command()
@handle_errors
def clean(gguf: bool = typer.Option(False, "--gguf", help="Remove the GGUF exports."),
          models: bool = typer.Option(False, "--models", help="Remove the converted models."),
          config: Optional[Path] = ConfigOption, quiet: bool = QuietOption,
          debug: bool = DebugOption) -> None:
    """Remove cached files of the kinds named (at least one of --gguf, --models); each is
    made again when a command next needs it."""
    import shutil

    from solm.core.errors import SolmError

    chosen = [k for k, on in (("gguf", gguf), ("models", models)) if on]
    if not chosen:
        raise SolmError("name what to remove: --gguf, --models, or both")
    report = cache_report()
    freed = 0
    for kind in chosen:
        folder = Path(report["kinds"][kind]["folder"])
        freed += report["kinds"][kind]["bytes"]
        if folder.is_dir():
            shutil.rmtree(folder)
        info(f"removed {folder}")
    out_console.print_json(json.dumps({"removed": chosen, "freed_bytes": freed}))
