"""Full finetunes kept as their difference from a base (the format: `solm.core.delta_packing`;
unpacking one into the cache: `solm.core.models.unpack_difference`): packing one from its
folder, and the base a kept one is timed like."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from solm.core.delta_packing import META, PACKED_META, is_delta_folder, params, write_difference
from solm.core.errors import SolmError
from solm.core import models
from solm.core.models import load_model, rebuilt_tokenizer


def pack_delta(model: str | Path, base: str, out: str | Path, rank: int, embed_rank: int,
               max_file_bytes: int = 4_800_000) -> Path:
    """Write `model` (a full model or an adapter chain over one) as its low-rank difference
    from `base` into `out`: shards, its config, its decoding defaults and solm.json."""
    full_model, tokenizer = load_model(str(model), dtype="float32", device="cpu")
    base_model, base_tokenizer = load_model(base, dtype="float32", device="cpu")
    if type(full_model.config).__name__ != type(base_model.config).__name__:
        raise SolmError(f"{model} is a {type(full_model.config).__name__}, {base} a "
                        f"{type(base_model.config).__name__}")
    source, out = Path(str(model)), Path(out)
    meta = json.loads((source / META).read_text()) if (source / META).exists() else {}
    meta.update(format="full", parent_model=base, packed_from=str(model))
    added = {t: i for t, i in tokenizer.get_vocab().items() if i >= len(base_tokenizer)}
    rebuilt = rebuilt_tokenizer(base, meta)
    if len(rebuilt) != len(tokenizer) or any(rebuilt.convert_tokens_to_ids(t) != i
                                             for t, i in added.items()):
        raise SolmError(f"{model}: its tokenizer is not {base}'s with the "
                        f"{meta.get('control_tokens', 'pasta')} control tokens added, so it "
                        f"cannot be rebuilt from them")
    write_difference(params(full_model), params(base_model), out, rank, embed_rank,
                     {"base": base, "from": str(model), "added_tokens": added},
                     max_file_bytes)
    full_model.config.save_pretrained(out)
    if (source / "generation_config.json").exists():  # the model's decoding defaults
        shutil.copyfile(source / "generation_config.json", out / "generation_config.json")
    (out / META).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def packed_base(model: str) -> str | None:
    """The base a model kept as a difference (a kept model's name or a packed folder) was
    packed against, else None: its passes cost the base's (same shapes, a few rows more)."""
    folder = models.ARTIFACTS_DIR / model if model in models.ARTIFACTS else Path(model)
    if not is_delta_folder(folder):
        return None
    return json.loads((folder / PACKED_META).read_text())["base"]
