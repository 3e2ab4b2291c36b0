import torch

from solm.core.control_tokens import (ASYNC_CLOSE, ASYNC_OPEN, PROMISE_OPEN, SYNC, pasta_tokens,
                                      promise_close)
from solm.core.models import load_tokenizer, tiny_model
from solm.core.vocabulary import add_control_tokens


def test_add_is_idempotent_and_grows_embeddings(tmp_path):
    tok = load_tokenizer("smollm2-135m")
    model, _ = tiny_model(tok)
    rows = model.get_input_embeddings().weight.shape[0]
    added = add_control_tokens(model, tok, "pasta")
    assert added == len(pasta_tokens())
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == rows + added == len(tok)
    # new rows start at the mean of the old ones, not random noise
    assert torch.allclose(emb[-1], emb[:rows].mean(0), atol=1e-6)
    assert add_control_tokens(model, tok, "pasta") == 0
    assert model.get_input_embeddings().weight.shape[0] == len(tok)
    assert add_control_tokens(model, tok, "tip", num_registers=4) == 4


def test_each_tag_stays_one_token_through_save_and_reload(tmp_path):
    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pasta")
    add_control_tokens(None, tok, "tip", num_registers=16)
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    text = (f"Intro{PROMISE_OPEN}a topic{promise_close(12)}{ASYNC_OPEN} body "
            f"text{ASYNC_CLOSE}\n{SYNC}<reg_3> step <reg_15>end")
    for t in (tok, reloaded):
        ids = t(text, add_special_tokens=False).input_ids
        pieces = t.convert_ids_to_tokens(ids)
        for tag in (PROMISE_OPEN, promise_close(12), ASYNC_OPEN, ASYNC_CLOSE, SYNC, "<reg_3>",
                    "<reg_15>"):
            assert tag in pieces, tag
        assert promise_close(1) not in pieces  # longest match: 12 is not read as 1 + "2"
        assert t.decode(ids) == text


def test_ordinary_html_is_not_read_as_a_tag():
    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pasta")
    pieces = tok.convert_ids_to_tokens(tok('<img src="a"/> and x="1"', add_special_tokens=False)
                                       .input_ids)
    assert not set(pieces) & set(pasta_tokens())


def test_register_rows_start_apart_at_their_words_and_other_tokens_at_the_mean():
    """Identical register rows leave a model nothing to tell registers apart by: `<reg_i>`
    starts at the mean of the rows of the words " register i", every other new token at the
    mean of the existing rows."""
    import torch

    from solm.core.models import load_tokenizer, tiny_model
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer("smollm2-135m")
    model, _ = tiny_model(tok, seed=4)
    before = model.get_input_embeddings().weight.detach().clone()
    add_control_tokens(model, tok, "tip", num_registers=4)
    with_registers = model.get_input_embeddings().weight.detach().clone()
    add_control_tokens(model, tok, "pasta")
    emb = model.get_input_embeddings().weight.detach()
    for i in range(4):
        words = tok(f" register {i}", add_special_tokens=False).input_ids
        row = emb[tok.convert_tokens_to_ids(f"<reg_{i}>")]
        assert torch.allclose(row, before[words].mean(dim=0))
    rows = [emb[tok.convert_tokens_to_ids(f"<reg_{i}>")] for i in range(4)]
    assert all(not torch.equal(a, b) for k, a in enumerate(rows) for b in rows[k + 1:])
    sync = emb[tok.convert_tokens_to_ids("<sync/>")]
    assert torch.allclose(sync, with_registers.mean(dim=0), atol=1e-6)
