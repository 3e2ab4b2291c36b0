"""Training with FlexAttention block masks built from PASTA's mask terms: the batch mask equals
the collator's dense one element by element, and the loss equals the SDPA loss (fp32)."""

import pytest
import torch

from solm.train.collator import PastaCollator
from solm.train.flex import batch_mask_mod, block_mask_for, resolve_attention

ROWS = [
    {"prompt": "Give two tips.", "text": "Tips:\n1. <promise topic=\"Sleep\" tokens=\"1\"/>"
     "<async>Sleep eight hours.</async>\n2. <promise topic=\"Water\" tokens=\"1\"/><async>"
     "Drink water.</async>\n<sync/>Done."},
    {"prompt": "Say hi.", "text": "Hi there!"},
]


def test_auto_picks_flex_on_cuda_only():
    from solm.core.errors import SolmError

    assert resolve_attention("auto", "cuda") == "flex"
    assert resolve_attention("auto", "cpu") == "sdpa"
    assert resolve_attention("sdpa", "cuda") == "sdpa"
    with pytest.raises(SolmError, match="no backward pass on a CPU"):
        resolve_attention("flex", "cpu")
    with pytest.raises(ValueError):
        resolve_attention("xformers", "cpu")


def test_batch_mask_equals_the_collators_dense_mask(pasta_tokenizer, vocab):
    dense = PastaCollator(pasta_tokenizer, vocab)(ROWS)["attention_mask"][:, 0]
    flex = PastaCollator(pasta_tokenizer, vocab, flex=True)(ROWS)
    attrs, lengths = flex["structure_attrs"], flex["lengths"]
    mod = batch_mask_mod(PastaCollator.term, attrs, lengths)
    t = dense.shape[-1]
    q, k = torch.arange(t)[:, None], torch.arange(t)[None, :]
    for b in range(len(ROWS)):
        assert torch.equal(mod(torch.tensor(b), 0, q, k), dense[b])
    assert lengths.tolist()[1] < t  # the short row is padded: the padding rule is exercised


def test_flex_loss_equals_sdpa_loss(pasta_tokenizer, vocab, tmp_path):
    from transformers import AutoModelForCausalLM

    from solm.core.models import tiny_model

    model, _ = tiny_model(pasta_tokenizer, seed=3)
    model.save_pretrained(tmp_path / "m")
    flex_model = AutoModelForCausalLM.from_pretrained(tmp_path / "m",
                                                      attn_implementation="flex_attention")
    dense = PastaCollator(pasta_tokenizer, vocab)(ROWS)
    batch = PastaCollator(pasta_tokenizer, vocab, flex=True)(ROWS)
    mask = block_mask_for(PastaCollator.term, batch.pop("structure_attrs"),
                          batch.pop("lengths"), "cpu")
    with torch.no_grad():
        ref = model(**dense)
        out = flex_model(**batch, attention_mask=mask)
    assert torch.allclose(out.loss, ref.loss, atol=1e-5), (out.loss, ref.loss)
    real = dense["labels"] != -100
    t = dense["input_ids"].shape[1]
    assert batch["input_ids"].shape[1] == 128  # flex pads to whole blocks
    torch.testing.assert_close(out.logits[:, :t][real], ref.logits[real], atol=1e-4, rtol=1e-4)
