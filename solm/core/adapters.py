"""LoRA adapter chains flattened into one adapter.

A preference round trains a LoRA adapter on its parent, which may itself be an adapter (the
previous round, down to a kept SFT model): loading unrolls the chain, merging each parent
first (`solm.core.models._load_adapter`). To ship a round's model under a name, its chain
down to a kept ancestor is flattened into one adapter over that ancestor, exactly:

- merged LoRA deltas add (W + B1 A1 s1 + B2 A2 s2 = W + [s1 B1, s2 B2] [A1; A2]), so the
  adapters' A matrices stack and their B matrices, scaled, sit side by side: rank r1 + r2,
  alpha = rank (scale 1);
- trainable token rows hold values, not deltas (peft writes them over the embedding): the
  newest adapter's rows win.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from solm.core.adapter_packing import CONFIG, LORA_KEY, META, TOKENS_SUFFIX, WEIGHTS
from solm.core.errors import SolmError
from solm.core.models import adapter_parent, artifact_folder


def chain(folder: str | Path, down_to: str) -> list[Path]:
    """The adapter folders from `folder` down to (not including) the model named `down_to`,
    newest first."""
    out, current = [], Path(folder)
    for _ in range(64):
        out.append(current)
        parent = adapter_parent(current)
        if parent == down_to:
            return out
        nxt = Path(artifact_folder(parent) or parent)
        if not (nxt / CONFIG).exists():
            raise SolmError(f"{folder}: its chain reaches {parent}, a full model, without "
                            f"passing {down_to}")
        current = nxt
    raise SolmError(f"{folder}: adapter chain longer than 64")


def flatten(folder: str | Path, down_to: str, out: str | Path,
            dtype: torch.dtype | None = None) -> Path:
    """Write one adapter over `down_to` equal to the chain from `folder` down to it.

    The stacking is done in fp32; `dtype` (e.g. bfloat16, half the bytes) is the stored
    one, None stores fp32."""
    from safetensors.torch import load_file, save_file

    links = chain(folder, down_to)
    configs = [json.loads((f / CONFIG).read_text()) for f in links]
    for f, c in zip(links, configs):
        if c.get("use_dora") or c.get("use_rslora") or c.get("alpha_pattern") or \
                c.get("rank_pattern"):
            raise SolmError(f"{f}: only plain LoRA adapters can be flattened")
    targets = set(configs[0]["target_modules"])
    if any(set(c["target_modules"]) != targets for c in configs):
        raise SolmError(f"{folder}: the chain's adapters target different modules")
    weights = [load_file(str(f / WEIGHTS)) for f in links]
    rank = sum(int(c["r"]) for c in configs)
    a_parts: dict[str, list[torch.Tensor]] = {}
    b_parts: dict[str, list[torch.Tensor]] = {}
    tokens: dict[str, torch.Tensor] = {}
    for c, w in zip(reversed(configs), reversed(weights)):  # oldest first
        scale = float(c["lora_alpha"]) / float(c["r"])
        for key, value in w.items():
            m = LORA_KEY.match(key)
            if m:
                parts = a_parts if m["which"] == "A" else b_parts
                value = value.float()
                parts.setdefault(m["module"], []).append(
                    value if m["which"] == "A" else value * scale)
            elif key.endswith(TOKENS_SUFFIX):
                tokens[key] = value  # the newest rows win
            else:
                raise SolmError(f"{folder}: adapter weight {key} cannot be flattened")
    flat: dict[str, torch.Tensor] = {}
    for module, parts in a_parts.items():
        if len(parts) != len(links) or len(b_parts.get(module, [])) != len(links):
            raise SolmError(f"{folder}: {module} is not adapted in every link of the chain")
        flat[f"{module}.lora_A.weight"] = torch.cat(parts, dim=0).contiguous()
        flat[f"{module}.lora_B.weight"] = torch.cat(b_parts[module], dim=1).contiguous()
    flat.update(tokens)
    if dtype is not None:
        flat = {k: v.to(dtype).contiguous() for k, v in flat.items()}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(flat, str(out / WEIGHTS))
    config = dict(configs[0], r=rank, lora_alpha=rank)
    (out / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    meta = json.loads((links[0] / META).read_text()) if (links[0] / META).exists() else {}
    meta.update(parent_model=down_to, flattened_from=[str(f) for f in links])
    (out / META).write_text(json.dumps(meta, indent=2) + "\n")
    for name in ("generation_config.json",):
        if (links[0] / name).exists():
            shutil.copyfile(links[0] / name, out / name)
    return out
