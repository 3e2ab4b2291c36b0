"""A chain of LoRA adapters (a preference round on a round on an SFT model) flattened into one
adapter over its kept ancestor loads to the same model as the chain (fp32, tiny model)."""

import json

import pytest
import torch

from solm.core.adapters import chain, flatten
from solm.core.errors import SolmError


def make_adapter(parent: str, out, seed: int, rank: int):
    from peft import LoraConfig, get_peft_model

    from solm.core.control_tokens import add_control_tokens
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
