"""The compact form a kept model's LoRA adapter is stored in inside the package, and the
adapter files' names.

A kept model's LoRA factors are stored as int8 with one scale per rank direction (a row of
A, a column of B: B A sums over the rank, so each direction's error stays its own), its
trainable token rows in bf16: a quarter of the fp32 bytes. On first use the adapter is
written out in full (bf16) into the cache, where peft loads it like any adapter.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch

from solm.core.errors import SolmError

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
META = "solm.json"
LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<which>[AB])\.weight$")
TOKENS_SUFFIX = "token_adapter.trainable_tokens_delta"

PACKED = "adapter_model.int8.safetensors"
PACKED_SHARD = "adapter_model.int8-{:05d}.safetensors"  # when one file would pass the limit
MAX_FILE_BYTES = 4_800_000  # a kept model's files stay under 5 MB (the repository's rule)


def packed_files(folder: str | Path) -> list[Path]:
    """The packed adapter's files in `folder`: one, or its shards in order (none: not packed)."""
    folder = Path(folder)
    if (folder / PACKED).exists():
        return [folder / PACKED]
    return sorted(folder.glob(PACKED_SHARD.replace("{:05d}", "[0-9]" * 5)))
_SCALE = ".int8_scale"
SIDE_FILES = (CONFIG, META, "generation_config.json")


def low_rank_factors(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """B (out x r) and A (r x in) with B @ A the best rank-`rank` approximation of `delta`
    (SVD: no other rank-r matrix is closer in Frobenius norm), the singular values in B."""
    u, sv, vh = torch.linalg.svd(delta.float(), full_matrices=False)
    r = min(rank, sv.numel())
    return (u[:, :r] * sv[:r]).contiguous(), vh[:r].contiguous()


def quantize_int8(w: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 values and one fp32 scale per slice along the rank direction (`dim` is reduced:
    1 for A's rows, 0 for B's columns), so each direction's error stays its own."""
    w = w.float()
    scale = (w.abs().amax(dim=dim, keepdim=True) / 127.0).clamp_min(1e-12)
    return (torch.round(w / scale).to(torch.int8).contiguous(),
            scale.squeeze(dim).to(torch.float32).contiguous())


def dequantize_int8(values: torch.Tensor, scale: torch.Tensor, dim: int) -> torch.Tensor:
    return values.float() * scale.unsqueeze(dim)


def replace_folder_atomically(tmp: Path, out: Path) -> None:
    """Move a finished `tmp` folder to `out`; if another process got there first, keep
    theirs."""
    import os

    try:
        os.replace(tmp, out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def _truncate(weights: dict[str, torch.Tensor], scale: float, rank: int
              ) -> dict[str, torch.Tensor]:
    """Each module's delta s B A, cut to its best rank-`rank` approximation (SVD), returned
    as factors whose product is the delta itself (scale folded into B)."""
    out = dict(weights)
    for key in [k for k in weights if LORA_KEY.match(k) and LORA_KEY.match(k)["which"] == "A"]:
        b_key = key.replace(".lora_A.", ".lora_B.")
        delta = scale * weights[b_key].float() @ weights[key].float()
        out[b_key], out[key] = low_rank_factors(delta, rank)
    return out


def pack(folder: str | Path, out: str | Path, max_rank: int | None = None,
         parent: str | None = None) -> Path:
    """Write `folder`'s adapter in the compact form (PACKED + its side files) into `out`;
    `max_rank` also cuts a higher-rank adapter (a flattened chain) to that rank by SVD;
    `parent` names the model it applies to where the folder names a local path (an adapter
    trained over a local copy of a kept model: the kept model's name is what every
    installation can load)."""
    from safetensors.torch import load_file, save_file

    folder, out = Path(folder), Path(out)
    weights = load_file(str(folder / WEIGHTS))
    config = json.loads((folder / CONFIG).read_text())
    if max_rank is not None and int(config["r"]) > max_rank:
        weights = _truncate(weights, float(config["lora_alpha"]) / float(config["r"]), max_rank)
        config = dict(config, r=max_rank, lora_alpha=max_rank)  # scale 1: folded into B
    packed: dict[str, torch.Tensor] = {}
    for key, value in weights.items():
        m = LORA_KEY.match(key)
        if not m:
            packed[key] = value.to(torch.bfloat16).contiguous()
            continue
        dim = 1 if m["which"] == "A" else 0  # reduce over all but the rank direction
        packed[key], packed[key + _SCALE] = quantize_int8(value, dim)
    out.mkdir(parents=True, exist_ok=True)
    for stale in packed_files(out):
        stale.unlink()
    shards = shard_tensors(packed, MAX_FILE_BYTES)
    if len(shards) == 1:
        save_file(packed, str(out / PACKED))
    else:  # a key and its scale may land in different shards: unpack reads them all
        for i, shard in enumerate(shards, 1):
            save_file(shard, str(out / PACKED_SHARD.format(i)))
    for name in SIDE_FILES:
        if (folder / name).exists() and (folder / name).resolve() != (out / name).resolve():
            shutil.copyfile(folder / name, out / name)
    if parent is not None:
        config = dict(config, base_model_name_or_path=parent)
        meta = json.loads((out / META).read_text()) if (out / META).exists() else {}
        (out / META).write_text(json.dumps(dict(meta, parent_model=parent), indent=2) + "\n")
    (out / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return out


def unpack(folder: str | Path, out: str | Path) -> Path:
    """Write the full adapter (bf16) of a packed `folder` into `out`, atomically."""
    import tempfile

    from safetensors.torch import load_file, save_file

    folder, out = Path(folder), Path(out)
    packed = {k: v for path in packed_files(folder) for k, v in load_file(str(path)).items()}
    full: dict[str, torch.Tensor] = {}
    for key, value in packed.items():
        if key.endswith(_SCALE):
            continue
        m = LORA_KEY.match(key)
        if m:
            value = dequantize_int8(value, packed[key + _SCALE], 1 if m["which"] == "A" else 0)
        full[key] = value.to(torch.bfloat16).contiguous()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".tmp"))
    save_file(full, str(tmp / WEIGHTS))
    for name in SIDE_FILES:
        if (folder / name).exists():
            shutil.copyfile(folder / name, tmp / name)
    replace_folder_atomically(tmp, out)
    return out


def shard_tensors(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name in sorted(tensors):
        t = tensors[name]
        n = t.numel() * t.element_size()
        if n > max_bytes:
            raise SolmError(f"{name}: {n} bytes, over the {max_bytes}-byte file limit")
        if size + n > max_bytes and shards[-1]:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += n
    return shards
