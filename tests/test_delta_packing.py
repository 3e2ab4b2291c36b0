"""A full finetune kept as its low-rank difference from the base (solm.core.delta_packing).

Oracles written apart from the code: a difference of rank <= r comes back whole (up to int8
rounding), so the unpacked model's logits equal the finetune's; a full-rank difference comes
back with the error Eckart-Young names (the root sum of squares of the singular values past
r: no rank-r matrix is closer), never less; added rows and norm differences come back exactly
up to bf16; every file stays under the limit."""

from __future__ import annotations

import json
import math

import pytest
import torch


def _finetune(base_folder, out, low_rank: int, full_rank_names=(), seed: int = 0):
    """A 'finetune' of the tiny base: control tokens added (rows drawn), every matrix moved by
    a rank-`low_rank` difference (those in `full_rank_names` by a full-rank one), norms moved."""
    from solm.core.models import load_model

    model, tok = load_model(base_folder, dtype="float32", device="cpu", system="pasta")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
            elif any(n in name for n in full_rank_names):
                p.add_(0.02 * torch.randn(p.shape, generator=g))
            else:
                b = torch.randn(p.shape[0], low_rank, generator=g)
                a = torch.randn(low_rank, p.shape[1], generator=g)
                p.add_(0.02 * b @ a / math.sqrt(low_rank))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "solm.json").write_text(json.dumps({"system": "pasta", "format": "full"}))
    return model


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_a_low_rank_difference_comes_back_and_the_logits_with_it(tmp_path, tiny_folder):
    from solm.core.delta_packing import shard_files
    from solm.core.kept_difference import pack_delta
    from solm.core.models import unpack_difference as unpack_delta
    from solm.core.models import load_model

    finetuned = _finetune(tiny_folder, tmp_path / "ft", low_rank=3)
    packed = pack_delta(tmp_path / "ft", tiny_folder, tmp_path / "packed", rank=3,
                        embed_rank=3, max_file_bytes=150_000)
    shards = shard_files(packed)
    assert len(shards) > 1 and all(s.stat().st_size < 150_000 + 4096 for s in shards)
    assert not (packed / "model.safetensors").exists()
    unpack_delta(packed, tmp_path / "full")
    model, tok = load_model(str(tmp_path / "full"), dtype="float32", device="cpu")
    assert "<sync/>" in tok.get_vocab()
    ids = torch.tensor([[1, 500, 7000, len(tok) - 1, 42, 49153]])
    with torch.no_grad():
        want = finetuned(ids).logits
        got = model(ids).logits
    assert (got - want).abs().max() < 2e-2 * want.abs().max()
    assert got.argmax(-1).equal(want.argmax(-1))


def test_a_full_rank_difference_keeps_its_best_rank_r_part(tmp_path, tiny_folder):
    from solm.core.kept_difference import pack_delta
    from solm.core.models import unpack_difference as unpack_delta
    from solm.core.models import load_model

    target = "layers.0.mlp.up_proj"
    _finetune(tiny_folder, tmp_path / "ft", low_rank=2, full_rank_names=(target,))
    rank = 4
    pack_delta(tmp_path / "ft", tiny_folder, tmp_path / "packed", rank=rank, embed_rank=2)
    unpack_delta(tmp_path / "packed", tmp_path / "full")
    base, _ = load_model(tiny_folder, dtype="float32", device="cpu")
    base_w = dict(base.named_parameters())
    ft, got = _weights(tmp_path / "ft"), _weights(tmp_path / "full")
    name = f"model.{target}.weight"
    delta = ft[name] - base_w[name].detach()
    s = torch.linalg.svdvals(delta)
    best = s[rank:].square().sum().sqrt()  # Eckart-Young: the least any rank-r matrix leaves
    err = (got[name] - ft[name]).norm()
    assert err >= best * (1 - 1e-4)
    assert err <= best * 1.02 + 1e-3 * delta.norm()
    rows = ft["model.embed_tokens.weight"].shape[0]
    added = slice(base_w["model.embed_tokens.weight"].shape[0], rows)
    assert got["model.embed_tokens.weight"].shape[0] == rows
    assert torch.allclose(got["model.embed_tokens.weight"][added],
                          ft["model.embed_tokens.weight"][added], atol=1e-2, rtol=1e-2)
    norm = "model.layers.1.input_layernorm.weight"
    assert torch.allclose(got[norm], ft[norm], atol=2e-3)


def test_a_weight_the_base_lacks_is_refused(tmp_path, tiny_folder):
    from solm.core.delta_packing import delta_tensors
    from solm.core.errors import SolmError

    base = {"w": torch.zeros(4, 3)}
    with pytest.raises(SolmError, match="only added rows"):
        delta_tensors({"w": torch.zeros(4, 5)}, base, 2, 2)
    with pytest.raises(SolmError, match="no such weight"):
        delta_tensors({"v": torch.zeros(4, 3)}, base, 2, 2)


def test_a_kept_model_stored_as_a_difference_loads_by_name(tmp_path, tiny_folder, monkeypatch):
    from solm.core import models
    from solm.core.kept_difference import pack_delta

    _finetune(tiny_folder, tmp_path / "ft", low_rank=2)
    monkeypatch.setattr(models, "ARTIFACTS_DIR", tmp_path / "kept")
    monkeypatch.setitem(models.ARTIFACTS, "tiny-kept", "a test model")
    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    pack_delta(tmp_path / "ft", tiny_folder, tmp_path / "kept" / "tiny-kept", rank=2,
               embed_rank=2)
    folder = models.artifact_folder("tiny-kept")
    assert folder.startswith(str(tmp_path / "cache"))
    model, tok = models.load_model("tiny-kept", dtype="float32", device="cpu")
    assert model.get_input_embeddings().weight.shape[0] == len(tok)
    assert models.model_system("tiny-kept") == "pasta"


def test_a_packed_folder_loads_by_its_path_with_the_finetunes_logits(tmp_path, tiny_folder,
                                                                       monkeypatch):
    """A user's own pack, passed as a path (not a kept name), loads as the model it keeps:
    the same logits as the finetune (rank <= r comes back whole), not the raw shards."""
    from solm.core import models
    from solm.core.kept_difference import pack_delta

    finetune = _finetune(tiny_folder, tmp_path / "ft", low_rank=2).eval()
    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    pack_delta(tmp_path / "ft", tiny_folder, tmp_path / "mine", rank=2, embed_rank=2)
    model, tok = models.load_model(str(tmp_path / "mine"), dtype="float32", device="cpu")
    ids = tok("a short probe of the kept logits", return_tensors="pt").input_ids
    with torch.no_grad():
        want, got = finetune(ids).logits, model(ids).logits
    assert (got - want).abs().max() < 2e-2 * want.abs().max()  # int8 factors' rounding
    assert got.argmax(-1).equal(want.argmax(-1))
    assert models.model_system(str(tmp_path / "mine")) == "pasta"
    assert models.artifact_folder(str(tmp_path / "ft")) is None  # an unpacked folder as it is
