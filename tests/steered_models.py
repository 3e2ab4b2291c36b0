"""Tiny random models steered to write some tokens often (registers, Pasta-Lang tags), so a
test's decodes exercise what those tokens do: the last MLP's bias pushes one hidden direction
and an untied head reads the favoured tokens off it."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def steered_model(tok, favoured: list[int], weight: float, seed: int):
    """A tiny llama over `tok` whose head adds ~20 x `weight` to the `favoured` tokens."""
    from solm.core.models import tiny_model

    model, _ = tiny_model(tok, seed=seed, mlp_bias=True)
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
                proj.bias.zero_()
        model.model.layers[-1].mlp.down_proj.bias[0] = 20.0
        head = model.model.embed_tokens.weight.detach().clone()
        head[:, 0] = 0.0
        head[favoured, 0] = weight
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(head)
    return model.eval()


def save_model(model, tok, folder: Path, **solm_json) -> str:
    """Save like a training output; `solm_json` keys (e.g. positions="overlap") go to its
    solm.json."""
    folder = Path(folder)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    if solm_json:
        (folder / "solm.json").write_text(json.dumps({"complete": True, **solm_json}))
    return str(folder)
