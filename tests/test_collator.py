"""Train/decode consistency: one teacher-forced training forward = the runtime's replay."""

import torch

from solm.core.chat import prompt_ids, text_ids
from solm.core.structure import IGNORE
from solm.decode.pasta.runtime import PastaRuntime
from solm.train.collator import PastaCollator

ROWS = [
    {"prompt": "Give me tips", "response": "unused",
     "annotated": 'Tips:\n1. Sleep:<promise topic="sleep" tokens="1"/><async> Get 8 hours.'
                  '</async>\n2. Eat:<promise topic="eat" tokens="1"/><async> Eat vegetables.'
                  '</async>\n<sync/>Done.'},
    {"prompt": "Say hi", "response": "Hi there!", "annotated": None},
]


def test_training_forward_equals_runtime_replay(pasta_tokenizer, vocab, tiny):
    col = PastaCollator(pasta_tokenizer, vocab)
    batch = col(ROWS)
    with torch.no_grad():
        train_logits = tiny(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                            attention_mask=batch["attention_mask"]).logits
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    for i, row in enumerate(ROWS):
        prompt = prompt_ids(pasta_tokenizer, row["prompt"])
        resp = text_ids(pasta_tokenizer, row["annotated"] or row["response"])
        res = rt.replay(prompt, resp + [pasta_tokenizer.eos_token_id], record_logits=True)
        got = train_logits[i, len(prompt):len(prompt) + len(res.ids)]
        assert (got - res.logits).abs().max().item() < 1e-4


def test_labels_skip_prompt_and_jump_over_blocks(pasta_tokenizer, vocab):
    col = PastaCollator(pasta_tokenizer, vocab)
    ex = col.encode(ROWS[0])
    assert all(t == IGNORE for t in ex.targets[: ex.prompt_len - 1])
    assert ex.targets[ex.prompt_len - 1] == ex.input_ids[ex.prompt_len]  # first response token
    closes = [i for i, t in enumerate(ex.input_ids) if t in vocab.close_tens]
    after_first_block = ex.input_ids.index(vocab.async_close) + 1
    assert ex.targets[closes[0]] == ex.input_ids[after_first_block]
    batch = col([ROWS[0]])
    shifted = batch["labels"][0]
    assert shifted[0] == IGNORE and shifted[1:].tolist() == ex.targets[:-1]


def test_baseline_sft_strips_the_tags(pasta_tokenizer, vocab):
    ex = PastaCollator(pasta_tokenizer, vocab, strip_annotations=True).encode(ROWS[0])
    assert not set(ex.input_ids) & set(vocab.control_ids)
    assert ex.visible.equal(torch.ones_like(ex.visible).tril())


def test_model_loss_with_preshifted_labels_is_the_structure_loss(pasta_tokenizer, vocab, tiny):
    col = PastaCollator(pasta_tokenizer, vocab)
    batch = col([ROWS[0]])
    out = tiny(**batch)
    targets = torch.tensor(col.encode(ROWS[0]).targets)
    keep = targets != IGNORE
    manual = torch.nn.functional.cross_entropy(out.logits[0][keep], targets[keep])
    assert torch.allclose(out.loss, manual, atol=1e-5)
