"""Mask terms are plain elementwise functions: the same term gives the dense training mask,
the runtime's rows, and a FlexAttention mask_mod / BlockMask."""

import pytest
import torch

from solm.core.chat import text_ids
from solm.core.structure import and_masks, as_mask_mod, or_masks, pairwise
from solm.core.systems import SYSTEMS, get_system, pasta

TEXT = ('A b<promise topic="x" tokens="2"/><async> c d e f g</async> h<promise topic="y" '
        'tokens="1"/><async> z z</async> q<sync/> r s') * 3


def test_terms_compose_like_their_names(pasta_tokenizer, vocab):
    s = pasta.structure(text_ids(pasta_tokenizer, TEXT), vocab)
    a = s.attrs
    terms = (pasta.main_up_to_promise, pasta.own_block, pasta.joined_after_sync)
    each = [pairwise(t, a, a) for t in terms]
    assert torch.equal(s.visible, each[0] | each[1] | each[2])
    assert torch.equal(pairwise(and_masks(*terms), a, a), each[0] & each[1] & each[2])
    assert all(e.any() for e in each) and not torch.equal(each[0], s.visible)
    assert or_masks(*terms).__name__ == "or_masks(main_up_to_promise, own_block, " \
                                        "joined_after_sync)"
    with pytest.raises(ValueError):
        or_masks()


def test_mask_mod_over_index_grids_is_the_dense_mask(pasta_tokenizer, vocab):
    s = pasta.structure(text_ids(pasta_tokenizer, TEXT), vocab)
    t = len(s.position_ids)
    mask_mod = as_mask_mod(pasta.pasta_visible, s.attrs)
    got = mask_mod(0, 0, torch.arange(t)[:, None], torch.arange(t)[None, :])
    assert torch.equal(got, s.visible)


def test_block_mask_keeps_exactly_the_blocks_with_a_visible_pair(pasta_tokenizer, vocab):
    from torch.nn.attention.flex_attention import create_block_mask

    ids = text_ids(pasta_tokenizer, TEXT)
    bs = 16
    ids = ids[: len(ids) // bs * bs]
    s = pasta.structure(ids, vocab)
    t, nb = len(ids), len(ids) // bs
    block_mask = create_block_mask(as_mask_mod(pasta.pasta_visible, s.attrs), None, None, t, t,
                                   device="cpu", BLOCK_SIZE=bs)
    kept = block_mask.to_dense()[0, 0].bool()
    expected = s.visible.reshape(nb, bs, nb, bs).any(dim=3).any(dim=1)
    assert torch.equal(kept, expected)
    assert not expected.all()  # some blocks are skipped: the test is not vacuous


def test_registry_names_every_system_and_structure_modules_share_one_shape():
    assert set(SYSTEMS) == {"pasta", "tip", "pdiff", "sot"}
    for name in ("pasta", "tip"):
        module = get_system(name).structure_module()
        assert module.NAME == name
        assert callable(module.structure) and hasattr(module.Vocab, "from_tokenizer")
    assert "<|mdm_mask|>" in get_system("pdiff").control_tokens(16)
    from solm.core.errors import SolmError
    with pytest.raises(SolmError, match="unknown system"):
        get_system("nope")
