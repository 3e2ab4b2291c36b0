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
packing. On first use `unpack_delta` adds the difference back onto the base's weights and
writes a full model folder (fp32, with that tokenizer) into the cache, which loads like any
checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from solm.core.errors import SolmError

SHARD_PREFIX = "delta-"
PACKED_META = "delta.json"
META = "solm.json"
_SIDE_FILES = ("config.json", "generation_config.json")
_A, _B, _ROWS, _VEC, _SCALE = ".delta_A", ".delta_B", ".rows_added", ".delta", ".scale"


def is_delta_folder(folder: str | Path) -> bool:
    return (Path(folder) / PACKED_META).exists()


def packed_base(model: str) -> str | None:
    """The base a model kept as a difference (a kept model's name or a packed folder) was
    packed against, else None: its passes cost the base's (same shapes, a few rows more)."""
    from solm.core.models import ARTIFACTS, ARTIFACTS_DIR

    folder = ARTIFACTS_DIR / model if model in ARTIFACTS else Path(model)
    if not is_delta_folder(folder):
        return None
    return json.loads((folder / PACKED_META).read_text())["base"]


def shard_files(folder: str | Path) -> list[Path]:
    return sorted(Path(folder).glob(f"{SHARD_PREFIX}*.safetensors"))


def _quantize(w: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 values and one fp32 scale per slice along the rank direction (reduced over `dim`)."""
    scale = (w.abs().amax(dim=dim, keepdim=True) / 127.0).clamp_min(1e-12)
    return torch.round(w / scale).to(torch.int8).contiguous(), scale.squeeze(dim).float().contiguous()


def low_rank_factors(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """B (out x r) and A (r x in) with B @ A the best rank-`rank` approximation of `delta`."""
    u, s, vh = torch.linalg.svd(delta.float(), full_matrices=False)
    r = min(rank, s.numel())
    return (u[:, :r] * s[:r]).contiguous(), vh[:r].contiguous()


def _params(model) -> dict[str, torch.Tensor]:
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
        out[name + _B], out[name + _B + _SCALE] = _quantize(bf, dim=0)  # a scale per column
        out[name + _A], out[name + _A + _SCALE] = _quantize(af, dim=1)  # a scale per row
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
            bf = stored[name + _B].float() * stored[name + _B + _SCALE].unsqueeze(0)
            af = stored[name + _A].float() * stored[name + _A + _SCALE].unsqueeze(1)
            w = b + bf @ af
            if name + _ROWS in stored:
                w = torch.cat([w, stored[name + _ROWS].float()], dim=0)
            out[name] = w.contiguous()
        else:
            raise SolmError(f"{name}: the packed difference has no entry for this base weight")
    return out


def _shards(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
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


def pack_delta(model: str | Path, base: str, out: str | Path, rank: int, embed_rank: int,
               max_file_bytes: int = 4_800_000) -> Path:
    """Write `model` (a full model or an adapter chain over one) as its low-rank difference
    from `base` into `out`: shards, its config, tokenizer and solm.json."""
    from safetensors.torch import save_file

    from solm.core.models import load_model

    full_model, tokenizer = load_model(str(model), dtype="float32", device="cpu")
    base_model, base_tokenizer = load_model(base, dtype="float32", device="cpu")
    if type(full_model.config).__name__ != type(base_model.config).__name__:
        raise SolmError(f"{model} is a {type(full_model.config).__name__}, {base} a "
                        f"{type(base_model.config).__name__}")
    tensors = delta_tensors(_params(full_model), _params(base_model), rank, embed_rank)
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for i, shard in enumerate(_shards(tensors, max_file_bytes), 1):
        save_file(shard, str(out / f"{SHARD_PREFIX}{i:05d}.safetensors"))
    full_model.config.save_pretrained(out)
    if full_model.generation_config is not None:
        full_model.generation_config.save_pretrained(out)
    source = Path(str(model))
    if (source / "generation_config.json").exists():  # the model's decoding defaults
        shutil.copyfile(source / "generation_config.json", out / "generation_config.json")
    meta = json.loads((source / META).read_text()) if (source / META).exists() else {}
    meta.update(format="full", parent_model=base, packed_from=str(model))
    (out / META).write_text(json.dumps(meta, indent=2) + "\n")
    added = {t: i for t, i in tokenizer.get_vocab().items() if i >= len(base_tokenizer)}
    rebuilt = _tokenizer(base, meta)
    if len(rebuilt) != len(tokenizer) or any(rebuilt.convert_tokens_to_ids(t) != i
                                             for t, i in added.items()):
        raise SolmError(f"{model}: its tokenizer is not {base}'s with the "
                        f"{meta.get('control_tokens', 'pasta')} control tokens added, so it "
                        f"cannot be rebuilt from them")
    (out / PACKED_META).write_text(json.dumps(
        {"base": base, "rank": rank, "embed_rank": embed_rank, "from": str(model),
         "added_tokens": added}, indent=2) + "\n")
    return out


def _tokenizer(base: str, meta: dict):
    """The base's tokenizer with the control tokens `meta` names, added as training adds them."""
    from solm.core.models import load_tokenizer
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer(base)
    add_control_tokens(None, tok, meta.get("control_tokens", "pasta"),
                       num_registers=meta.get("num_registers", 16),
                       pad_cycle=meta.get("pad_cycle", 1))
    return tok


def unpack_delta(folder: str | Path, out: str | Path) -> Path:
    """Write the full model (fp32) of a packed difference `folder` into `out`, atomically."""
    from safetensors.torch import load_file, save_file

    from solm.core.models import load_model

    folder, out = Path(folder), Path(out)
    info = json.loads((folder / PACKED_META).read_text())
    stored: dict[str, torch.Tensor] = {}
    for shard in shard_files(folder):
        stored.update(load_file(str(shard)))
    base_model, _ = load_model(info["base"], dtype="float32", device="cpu")
    weights = apply_delta(_params(base_model), stored)
    tokenizer = _tokenizer(info["base"], json.loads((folder / META).read_text()))
    if any(tokenizer.convert_tokens_to_ids(t) != i for t, i in info["added_tokens"].items()):
        raise SolmError(f"{folder}: the control tokens' ids rebuilt on {info['base']} differ "
                        f"from those the model was packed with")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".tmp"))
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    for name in _SIDE_FILES + (META,):
        if (folder / name).exists():
            shutil.copyfile(folder / name, tmp / name)
    tokenizer.save_pretrained(tmp)
    try:
        os.replace(tmp, out)
    except OSError:  # another process unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out
