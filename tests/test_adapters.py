"""A chain of LoRA adapters (a preference round on a round on an SFT model) flattened into one
adapter over its kept ancestor loads to the same model as the chain (fp32, tiny model)."""

import json
from pathlib import Path

import pytest
import torch

from solm.core.adapters import chain, flatten
from solm.core.errors import SolmError


def make_adapter(parent: str, out, seed: int, rank: int):
    from peft import LoraConfig, get_peft_model

    from solm.core.vocabulary import add_control_tokens
    from solm.core.models import load_model
    from solm.core.systems.pasta import PastaVocab

    model, tok = load_model(parent, dtype="fp32", device="cpu")
    add_control_tokens(model, tok, "pasta")
    vocab = PastaVocab.from_tokenizer(tok)
    ids = vocab.control_ids[:5]
    cfg = LoraConfig(r=rank, lora_alpha=3 * rank, target_modules="all-linear",
                     task_type="CAUSAL_LM", trainable_token_indices=ids)
    peft_model = get_peft_model(model, cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name or "trainable_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    peft_model.save_pretrained(str(out), save_embedding_layers=False)
    (out / "solm.json").write_text(json.dumps({"parent_model": parent,
                                               "control_tokens": "pasta"}))
    return str(out)


def logits_of(name: str) -> torch.Tensor:
    from solm.core.models import load_model

    model, tok = load_model(name, dtype="fp32", device="cpu")
    ids = torch.tensor([tok("Give me three tips <async> please").input_ids
                        + [len(tok) - 1, len(tok) - 3]])
    with torch.no_grad():
        return model(input_ids=ids).logits[0]


def test_a_flattened_chain_is_the_chain(tmp_path, tiny_folder):
    first = make_adapter(tiny_folder, tmp_path / "sft", seed=1, rank=4)
    second = make_adapter(first, tmp_path / "round1", seed=2, rank=2)
    third = make_adapter(second, tmp_path / "round2", seed=3, rank=3)
    assert chain(third, first) == [tmp_path / "round2", tmp_path / "round1"]
    flat = flatten(third, first, tmp_path / "flat")
    config = json.loads((flat / "adapter_config.json").read_text())
    assert config["r"] == 5 and config["lora_alpha"] == 5
    expected = logits_of(third)
    assert torch.allclose(logits_of(str(flat)), expected, atol=1e-4)
    # not a vacuous check: dropping the newest round changes the model
    assert not torch.allclose(logits_of(second), expected, atol=1e-3)


def test_a_chain_flattened_to_bf16_is_half_the_bytes_and_near_the_chain(tmp_path, tiny_folder):
    from safetensors.torch import load_file

    first = make_adapter(tiny_folder, tmp_path / "sft", seed=1, rank=4)
    second = make_adapter(first, tmp_path / "round1", seed=2, rank=2)
    full = flatten(second, first, tmp_path / "fp32")
    half = flatten(second, first, tmp_path / "bf16", dtype=torch.bfloat16)
    assert {v.dtype for v in load_file(str(half / "adapter_model.safetensors")).values()} \
        == {torch.bfloat16}
    size = lambda f: (f / "adapter_model.safetensors").stat().st_size  # noqa: E731
    assert size(half) < 0.6 * size(full)
    expected = logits_of(second)
    got = logits_of(str(half))
    assert torch.allclose(got, expected, atol=1e-2)  # dropping a link moves them by ~1
    assert got.argmax(-1).eq(expected.argmax(-1)).float().mean() > 0.9


def test_a_chain_that_misses_the_ancestor_is_refused(tmp_path, tiny_folder):
    first = make_adapter(tiny_folder, tmp_path / "a", seed=1, rank=2)
    with pytest.raises(SolmError, match="without passing"):
        chain(first, "pasta-sft-cpu")


def _lora_file(folder, deltas: dict[str, tuple[torch.Tensor, torch.Tensor]], r: int,
               alpha: int) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    weights = {}
    for module, (b, a) in deltas.items():
        weights[f"{module}.lora_A.weight"] = a
        weights[f"{module}.lora_B.weight"] = b
    weights["base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta"] = \
        torch.randn(3, 16)
    save_file(weights, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"r": r, "lora_alpha": alpha}))


def _deltas(folder, scale: float) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    w = load_file(str(folder / "adapter_model.safetensors"))
    return {k[:-len(".lora_A.weight")]: scale * w[k.replace(".lora_A.", ".lora_B.")].float()
            @ w[k].float() for k in w if k.endswith(".lora_A.weight")}


def test_pack_unpack_keeps_every_delta_within_the_int8_step(tmp_path):
    """The compact form stores the factors as int8 (a quarter of fp32's bytes); unpacked,
    each module's delta B A
    differs from the original by no more than int8 rounding allows per rank direction."""
    from solm.core.adapter_packing import PACKED, pack, unpack

    torch.manual_seed(0)
    src = tmp_path / "src"
    deltas = {f"m{i}": (torch.randn(24, 4) * 0.01, torch.randn(4, 16)) for i in range(3)}
    _lora_file(src, deltas, r=4, alpha=8)
    pack(src, tmp_path / "packed")
    from safetensors.torch import load_file as _load
    stored = _load(str(tmp_path / "packed" / PACKED))
    assert {v.dtype for k, v in stored.items() if k.endswith(".weight")} == {torch.int8}
    unpack(tmp_path / "packed", tmp_path / "full")
    got = _deltas(tmp_path / "full", 2.0)
    for module, (b, a) in deltas.items():
        # per element: sum over k of |dB_ik| |A_kj| + |B_ik| |dA_kj|, with |dB_ik| <=
        # max_i |B_ik| / 254 and |dA_kj| <= max_j |A_kj| / 254; bf16 storage adds ~2^-8
        db = b.abs().amax(0, keepdim=True) / 254 * torch.ones_like(b)
        da = a.abs().amax(1, keepdim=True) / 254 * torch.ones_like(a)
        bound = 2.0 * (db @ a.abs() + b.abs() @ da + db @ da)
        bound += 2.0 * (b.abs() @ a.abs()) * 2 ** -7
        assert ((got[module] - 2.0 * b @ a).abs() <= bound + 1e-7).all(), module
    tokens = "base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta"
    from safetensors.torch import load_file
    assert torch.allclose(load_file(str(tmp_path / "full" / "adapter_model.safetensors"))[tokens]
                          .float(), load_file(str(src / "adapter_model.safetensors"))[tokens],
                          rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("parent", [None, "tip-sft-cpu"])
def test_a_packed_adapter_names_the_parent_it_was_given(tmp_path, parent):
    """An adapter trained over a local copy of a kept model is packed naming the kept model
    (what loading reads back, both records); without a parent it keeps its own."""
    from solm.core.adapter_packing import pack, unpack
    from solm.core.models import adapter_parent

    src = tmp_path / "src"
    _lora_file(src, {"m": (torch.zeros(4, 2), torch.ones(2, 4))}, r=2, alpha=2)
    config = json.loads((src / "adapter_config.json").read_text())
    (src / "adapter_config.json").write_text(json.dumps(
        dict(config, base_model_name_or_path="/local/runs/tip-sft")))
    (src / "solm.json").write_text(json.dumps({"parent_model": "runs/tip-sft", "steps": 3}))
    pack(src, tmp_path / "packed", parent=parent)
    unpack(tmp_path / "packed", tmp_path / "full")
    meta = json.loads((tmp_path / "full" / "solm.json").read_text())
    config = json.loads((tmp_path / "full" / "adapter_config.json").read_text())
    assert adapter_parent(tmp_path / "full") == (parent or "runs/tip-sft")
    assert meta["steps"] == 3
    assert config["base_model_name_or_path"] == (parent or "/local/runs/tip-sft")
    assert json.loads((src / "solm.json").read_text())["parent_model"] == "runs/tip-sft"


def test_pack_cuts_rank_by_svd_exactly_when_the_delta_has_that_rank(tmp_path):
    """A rank-8 adapter whose deltas have rank 3 packs at max_rank 3 with the same deltas
    (up to int8 rounding); the config says rank 3 with its scale folded in."""
    from solm.core.adapter_packing import pack, unpack

    torch.manual_seed(1)
    src = tmp_path / "src"
    deltas = {}
    for i in range(2):
        low = torch.randn(20, 3) @ torch.randn(3, 8)  # B of rank 3: B A has rank <= 3
        deltas[f"m{i}"] = (low * 0.05, torch.randn(8, 12))
    _lora_file(src, deltas, r=8, alpha=16)
    pack(src, tmp_path / "packed", max_rank=3)
    config = json.loads((tmp_path / "packed" / "adapter_config.json").read_text())
    assert config["r"] == 3 and config["lora_alpha"] == 3
    got = _deltas(unpack(tmp_path / "packed", tmp_path / "full"), 1.0)
    for module, (b, a) in deltas.items():
        want = 2.0 * b @ a
        assert (got[module] - want).abs().max() <= 0.02 * want.abs().max()


def test_an_adapter_over_the_file_limit_packs_into_shards_that_unpack_the_same(tmp_path,
                                                                                monkeypatch):
    """A packed adapter larger than the file limit is written as shards, each under it, and
    unpacks to exactly what the single file unpacks to."""
    from safetensors.torch import load_file

    import solm.core.adapter_packing as packing

    torch.manual_seed(1)
    src = tmp_path / "src"
    deltas = {f"m{i}": (torch.randn(64, 8) * 0.01, torch.randn(8, 64)) for i in range(6)}
    _lora_file(src, deltas, r=8, alpha=16)
    packing.pack(src, tmp_path / "one")
    one = (tmp_path / "one" / packing.PACKED).stat().st_size
    monkeypatch.setattr(packing, "MAX_FILE_BYTES", one // 3)
    packing.pack(src, tmp_path / "sharded")
    shards = packing.packed_files(tmp_path / "sharded")
    assert len(shards) >= 3 and not (tmp_path / "sharded" / packing.PACKED).exists()
    assert all(p.stat().st_size <= one // 3 + 1024 for p in shards)  # + the file header
    packing.unpack(tmp_path / "one", tmp_path / "full_one")
    packing.unpack(tmp_path / "sharded", tmp_path / "full_sharded")
    a = load_file(str(tmp_path / "full_one" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "full_sharded" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    packing.pack(src, tmp_path / "sharded")  # packed again: no stale shard stays behind
    assert packing.packed_files(tmp_path / "sharded") == shards


def test_every_side_file_reaches_the_unpacked_adapter_byte_for_byte(tmp_path):
    """A kept adapter's side files (its config, solm.json, generation_config.json) travel
    from the trained folder into the package and from there into the cache unchanged, each
    one there only when the source had it; an edited side file gives a fresh cached copy."""
    from solm.core.adapter_packing import pack, unpack
    from solm.core.models import _unpacked_copy

    src = tmp_path / "src"
    _lora_file(src, {"m0": (torch.randn(8, 2), torch.randn(2, 6))}, r=2, alpha=4)
    sides = {"solm.json": '{"system": "tip", "marker": 1}\n',
             "generation_config.json": '{"repetition_penalty": 1.37}\n'}
    for name, text in sides.items():
        (src / name).write_text(text)
    packed = pack(src, tmp_path / "packed")
    unpacked = unpack(packed, tmp_path / "full")
    for folder in (packed, unpacked):
        for name, text in sides.items():
            assert (folder / name).read_text() == text, (folder, name)
        config = json.loads((folder / "adapter_config.json").read_text())
        assert config["r"] == 2
    (src / "generation_config.json").unlink()
    bare = unpack(pack(src, tmp_path / "packed2"), tmp_path / "full2")
    assert not (bare / "generation_config.json").exists()
    first = _unpacked_copy(packed, "kept")
    (packed / "generation_config.json").write_text('{"repetition_penalty": 1.0}\n')
    second = _unpacked_copy(packed, "kept")
    assert first != second
    assert json.loads((Path(second) / "generation_config.json").read_text()) == {
        "repetition_penalty": 1.0}
