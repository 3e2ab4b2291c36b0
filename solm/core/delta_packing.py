"""A full finetune kept compact: its difference from the base model, cut to low rank.

A LoRA adapter is packed as its own factors (`solm.core.adapter_packing`); a model trained
with every weight free (or an adapter chain over one) has no factors, so it is stored as
`model - base`:

- each matrix's difference cut to its best rank-`rank` approximation (SVD: no other rank-r
  matrix is closer in Frobenius norm), as factors B (out x r, the singular values folded in)
  and A (r x in), int8 with one scale per rank direction, as packed adapters are;
- the embedding's rows the base has: the same, at `embed_rank`; rows the base lacks (the
  control tokens the finetune added): stored whole (bf16);
- vectors (norms): the difference in bf16.

The tensors go into shards of at most `max_file_bytes` each (a package keeps every file
small). No tokenizer is stored (3.5 MB for the embedded model): the base's, with the control tokens
added as training added them, is rebuilt and checked against the token ids recorded at
packing. On first use `write_full` adds the difference back onto the base's weights and
writes a full model folder (fp32, with that tokenizer) into the cache, which loads like any
checkpoint. Packing a model and unpacking a kept one by name load models:
`solm.core.kept_difference`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

from solm.core.adapter_packing import (dequantize_int8, shard_tensors as _shards, low_rank_factors, quantize_int8,
                                       replace_folder_atomically)
from solm.core.errors import SolmError

SHARD_PREFIX = "delta-"
PACKED_META = "delta.json"
META = "solm.json"
_SIDE_FILES = ("config.json", "generation_config.json")
_A, _B, _ROWS, _VEC, _SCALE = ".delta_A", ".delta_B", ".rows_added", ".delta", ".scale"


def is_delta_folder(folder: str | Path) -> bool:
    return (Path(folder) / PACKED_META).exists()


def shard_files(folder: str | Path) -> list[Path]:
    return sorted(Path(folder).glob(f"{SHARD_PREFIX}*.safetensors"))


def params(model) -> dict[str, torch.Tensor]:
    """Name -> fp32 tensor, a tied weight once (under the name that owns it)."""
    return {name: p.detach().float().cpu() for name, p in model.named_parameters()}


def delta_tensors(full: dict[str, torch.Tensor], base: dict[str, torch.Tensor], rank: int,
                  embed_rank: int) -> dict[str, torch.Tensor]:
    """The stored form of `full - base` (see the module docstring)."""
    out: dict[str, torch.Tensor] = {}
    for name, w in full.items():
        b = base.get(name)
        if b is None:
            raise SolmError(f"{name}: the base model has no such weight, so it cannot be a "
                            f"difference from it")
        if w.ndim == 1:
            if w.shape != b.shape:
                raise SolmError(f"{name}: shape {tuple(w.shape)} against the base's "
                                f"{tuple(b.shape)}")
            out[name + _VEC] = (w - b).to(torch.bfloat16).contiguous()
            continue
        if w.ndim != 2 or w.shape[1] != b.shape[1] or w.shape[0] < b.shape[0]:
            raise SolmError(f"{name}: shape {tuple(w.shape)} against the base's "
                            f"{tuple(b.shape)}: only added rows can differ")
        kept = b.shape[0]
        if w.shape[0] > kept:  # rows the finetune added (control tokens): whole
            out[name + _ROWS] = w[kept:].to(torch.bfloat16).contiguous()
        r = embed_rank if w.shape[0] != b.shape[0] or "embed" in name else rank
        bf, af = low_rank_factors(w[:kept] - b, r)
        out[name + _B], out[name + _B + _SCALE] = quantize_int8(bf, dim=0)  # per column
        out[name + _A], out[name + _A + _SCALE] = quantize_int8(af, dim=1)  # per row
    return out


def apply_delta(base: dict[str, torch.Tensor], stored: dict[str, torch.Tensor]
                ) -> dict[str, torch.Tensor]:
    """base + the stored difference, per weight (fp32)."""
    out: dict[str, torch.Tensor] = {}
    for name, b in base.items():
        b = b.float()
        if name + _VEC in stored:
            out[name] = b + stored[name + _VEC].float()
        elif name + _A in stored:
            bf = dequantize_int8(stored[name + _B], stored[name + _B + _SCALE], 0)
            af = dequantize_int8(stored[name + _A], stored[name + _A + _SCALE], 1)
            w = b + bf @ af
            if name + _ROWS in stored:
                w = torch.cat([w, stored[name + _ROWS].float()], dim=0)
            out[name] = w.contiguous()
        else:
            raise SolmError(f"{name}: the packed difference has no entry for this base weight")
    return out


def write_difference(full: dict[str, torch.Tensor], base: dict[str, torch.Tensor], out: Path,
                     rank: int, embed_rank: int, info: dict,
                     max_file_bytes: int = 4_800_000) -> None:
    """`full - base` in its stored form, sharded into `out` (created afresh), with `info`
    (the base's name, the added tokens' ids...) beside it."""
    from safetensors.torch import save_file

    tensors = delta_tensors(full, base, rank, embed_rank)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for i, shard in enumerate(_shards(tensors, max_file_bytes), 1):
        save_file(shard, str(out / f"{SHARD_PREFIX}{i:05d}.safetensors"))
    (out / PACKED_META).write_text(json.dumps(
        {**info, "rank": rank, "embed_rank": embed_rank}, indent=2) + "\n")


def read_info(folder: str | Path) -> tuple[dict, dict]:
    """(delta.json, solm.json) of a packed folder."""
    folder = Path(folder)
    meta = json.loads((folder / META).read_text()) if (folder / META).exists() else {}
    return json.loads((folder / PACKED_META).read_text()), meta


def write_full(folder: str | Path, out: str | Path, base: dict[str, torch.Tensor],
               tokenizer) -> Path:
    """The full model (fp32) of a packed difference `folder` over the `base` weights, with
    `tokenizer` (the base's with the control tokens added), written to `out` atomically."""
    from safetensors.torch import load_file, save_file

    folder, out = Path(folder), Path(out)
    info, _ = read_info(folder)
    if any(tokenizer.convert_tokens_to_ids(t) != i for t, i in info["added_tokens"].items()):
        raise SolmError(f"{folder}: the control tokens' ids rebuilt on {info['base']} differ "
                        f"from those the model was packed with")
    stored: dict[str, torch.Tensor] = {}
    for shard in shard_files(folder):
        stored.update(load_file(str(shard)))
    weights = apply_delta(base, stored)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".tmp"))
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    for name in _SIDE_FILES + (META,):
        if (folder / name).exists():
            shutil.copyfile(folder / name, tmp / name)
    tokenizer.save_pretrained(tmp)
    replace_folder_atomically(tmp, out)
    return out
