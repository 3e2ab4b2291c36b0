"""FlexAttention wherever it is chosen: every trainer's loss of a batch whose
structure is not causal is the same under `--attention flex` and `--attention sdpa` (forward,
no_grad, fp32), built through the trainer's own pieces (its loader, collator and Trainer
class); a flex model refuses a dense mask; flex batches never build the dense T x T mask; a
run of varied lengths compiles a bounded number of graphs.

FlexAttention runs forward on a CPU (compiled) but has no backward there: training under flex
is refused on a CPU (`resolve_attention`), so these compare forward losses."""

from __future__ import annotations

import json

import pytest
import torch

from solm.core.chat import text_ids
from solm.core.errors import SolmError
from solm.train.base import SolmTrainer

from solm.train.flex import flex_copy as flex_twin

PASTA_ROWS = [
    {"prompt": "Give two tips.",
     "annotated": 'Tips:\n1. <promise topic="Sleep" tokens="1"/><async>Sleep eight hours.'
                  '</async>\n2. <promise topic="Water" tokens="1"/><async>Drink water.'
                  '</async>\n<sync/>Done.'},
    {"prompt": "Say hi.", "annotated": "Hi there!"},
    {"prompt": "List two fruits.",
     "annotated": 'Fruits: <promise topic="one" tokens="1"/><async>Apples are red.</async> and '
                  '<promise topic="two" tokens="1"/><async>Pears are green.</async><sync/> '
                  'That is all.'},
]
# register reuse kills steps: the mask is not causal
TIP_ROWS = [
    {"prompt": "What is 2 + 3?",
     "annotated": "<reg_0>Two plus three. <reg_1>That is five. <reg_0>So 5. <reg_2>Answer: 5"},
    {"prompt": "Name a prime.", "annotated": "<reg_0>Two is prime. <reg_0>Answer: 2"},
]
TAGGED_ANSWERS = ['Tips: <promise topic="a" tokens="1"/><async>Sleep well.</async> and '
                  '<promise topic="b" tokens="1"/><async>Drink water.</async><sync/> Done.',
                  "Eat greens every day."]


def write_jsonl(path, rows) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def pasta_sft(tmp_path, model, tok):
    from solm.train.sft import PastaSFTConfig, PastaSFTTrainer
    return PastaSFTTrainer(PastaSFTConfig(model=model, out=str(tmp_path / "out"), quiet=True, eval_rows=0,
                                          data=write_jsonl(tmp_path / "d.jsonl", PASTA_ROWS)))


def baseline_sft(tmp_path, model, tok):
    from solm.train.sft import PastaSFTConfig, PastaSFTTrainer
    return PastaSFTTrainer(PastaSFTConfig(model=model, out=str(tmp_path / "out"), quiet=True, eval_rows=0,
                                          strip_annotations=True,
                                          data=write_jsonl(tmp_path / "d.jsonl", PASTA_ROWS)))


def tip_sft(tmp_path, model, tok):
    from solm.train.tip_sft import TipSFTConfig, TipSFTTrainer
    return TipSFTTrainer(TipSFTConfig(model=model, out=str(tmp_path / "out"), quiet=True, eval_rows=0,
                                      registers=4,
                                      data=write_jsonl(tmp_path / "d.jsonl", TIP_ROWS)))


def pdiff_sft(tmp_path, model, tok):
    from solm.train.pdiff_sft import PdiffSFTConfig, PdiffSFTTrainer
    return PdiffSFTTrainer(PdiffSFTConfig(model=model, out=str(tmp_path / "out"), quiet=True, eval_rows=0,
                                          data=write_jsonl(tmp_path / "d.jsonl",
                                                           PASTA_ROWS[::2])))


def bonbon(tmp_path, model, tok):
    from solm.train.bonbon import BonbonConfig, BonbonTrainer
    rows = [{"id": f"p{i}", "prompt": f"Give me tip {i}.", "n": 2 + i,
             "chosen": {"ids": text_ids(tok, TAGGED_ANSWERS[i % 2]), "forced": [],
                        "ended": True},
             "rejected": {"ids": text_ids(tok, TAGGED_ANSWERS[(i + 1) % 2]), "forced": [],
                          "ended": i % 2 == 0}} for i in range(2)]
    return BonbonTrainer(BonbonConfig(model=model, out=str(tmp_path / "out"), quiet=True, eval_rows=0,
                                      data=write_jsonl(tmp_path / "d.jsonl", rows)))


TRAINERS = {"pasta-sft": pasta_sft, "baseline-sft": baseline_sft, "tip-sft": tip_sft,
            "pdiff-sft": pdiff_sft, "bonbon": bonbon}


def first_batch_loss(stage: SolmTrainer, attention: str, tmp_path, monkeypatch):
    """The loss of the first training rows as the stage's own Trainer computes it, with the
    model its loader returns under `attention` (its collator and Trainer class follow)."""
    monkeypatch.setattr(type(stage), "attention", lambda self: attention)
    stage.check()
    model, tok, vocab = stage.load_model()
    data = stage.prepare_data(stage.read_data(), tok, vocab)
    args = stage.training_arguments(data, tmp_path / f"ckpt-{attention}", 1, False, False)
    stage.before_training(model, tok, vocab, data, args)
    trainer = stage._trainer(model, tok, vocab, data, args, tmp_path / f"log-{attention}.jsonl")
    stage._close_log()
    batch = trainer.data_collator(data.train[:2])
    model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(model, batch)
    return loss, model, batch


@pytest.mark.parametrize("name", list(TRAINERS))
def test_every_trainers_loss_is_the_same_under_flex_and_sdpa(name, tmp_path, tiny_folder,
                                                             pasta_tokenizer, monkeypatch):
    make = TRAINERS[name]
    dense_loss, _, dense_batch = first_batch_loss(
        make(tmp_path / "a", tiny_folder, pasta_tokenizer), "sdpa", tmp_path / "a",
        monkeypatch)
    flex_loss, flex_model, flex_batch = first_batch_loss(
        make(tmp_path / "b", tiny_folder, pasta_tokenizer), "flex", tmp_path / "b",
        monkeypatch)
    assert abs(flex_loss.item() - dense_loss.item()) < 1e-4, (flex_loss, dense_loss)
    assert torch.isfinite(dense_loss)
    # the flex batch carried a BlockMask, padded to whole blocks; the dense one a 4-D mask
    from torch.nn.attention.flex_attention import BlockMask
    assert isinstance(flex_batch["attention_mask"], BlockMask)
    assert flex_batch["input_ids"].shape[1] % 128 == 0
    assert dense_batch["attention_mask"].dim() == 4
    if name != "baseline-sft":  # the structure really is not causal
        t = dense_batch["attention_mask"].shape[-1]
        assert not torch.equal(dense_batch["attention_mask"][:, 0],
                               torch.ones(t, t, dtype=torch.bool).tril().expand(
                                   len(dense_batch["input_ids"]), t, t))
    # and the flex model the loader gave refuses a dense mask with a clear error
    with pytest.raises(SolmError, match="FlexAttention"):
        with torch.no_grad():
            flex_model(input_ids=dense_batch["input_ids"],
                       attention_mask=dense_batch["attention_mask"])


def test_flex_collation_builds_no_dense_mask(pasta_tokenizer, vocab, monkeypatch):
    """In flex mode the [T, T] mask is never built (only attributes travel)."""
    from solm.train import collator as collator_module
    from solm.train.collator import PastaCollator

    rows = [{"prompt": r["prompt"], "text": r["annotated"]} for r in PASTA_ROWS]

    def no_dense(*args, **kwargs):
        raise AssertionError("a dense mask was built")

    monkeypatch.setattr(collator_module, "pairwise", no_dense)
    batch = PastaCollator(pasta_tokenizer, vocab, flex=True)(rows)
    assert "attention_mask" not in batch and "structure_attrs" in batch
    with pytest.raises(AssertionError, match="dense mask"):
        PastaCollator(pasta_tokenizer, vocab)(rows)


def test_flex_graphs_stay_bounded_over_varied_lengths(tiny, pasta_tokenizer, vocab):
    """Log-probs over batches of 11 different lengths: lengths pad to whole blocks, so the
    compiled graphs stop growing once each block count was seen."""
    from torch._dynamo.utils import counters

    from solm.train.sequence_logprobs import SampledAnswer, batch_answers, token_logprobs

    model = flex_twin(tiny)
    tok = pasta_tokenizer
    prompt = text_ids(tok, "Say something.")
    base = text_ids(tok, TAGGED_ANSWERS[0])
    filler = text_ids(tok, " and more words")

    def graphs_after(lengths) -> int:
        for extra in lengths:
            answer = SampledAnswer(prompt, base + filler * extra)
            batch = batch_answers([answer, SampledAnswer(prompt, base)], vocab,
                                  tok.eos_token_id, 0, flex=True)
            with torch.no_grad():
                token_logprobs(model, batch)
        return counters["stats"]["unique_graphs"]

    graphs_after([0, 40])  # both block counts (1 and 2 blocks) compiled once
    settled = graphs_after([1, 2])
    after = graphs_after([3, 5, 8, 13, 21, 30, 34, 38, 39])
    assert after == settled, (settled, after)


def test_grpo_layout_masks_follow_tips_rules_under_both_attentions(tip_tok):
    """TRL's layout (left-padded prompts, right-padded completions, an extra flex padding
    tail): the flex `mask_mod` over every pair and the dense mask both equal TIP's rules
    written a second way (`oracles.tip_oracle`) on each row's real columns, and a padding
    column sees only itself."""
    from oracles import tip_oracle

    from conftest import TIP_REGISTERS
    from solm.core.systems.tip import TipVocab, tip_visible
    from solm.train.flex import batch_mask_mod, dense_batch_mask
    from solm.train.grpo import structured_inputs

    vocab = TipVocab.from_tokenizer(tip_tok, TIP_REGISTERS)
    prompts = [text_ids(tip_tok, "What is 2 + 3?"), text_ids(tip_tok, "Hi")]
    completions = [text_ids(tip_tok, "<reg_0>Two. <reg_1>Three. <reg_0>Five."),
                   text_ids(tip_tok, "<reg_2>Hello <reg_2>there")]
    p, c = max(map(len, prompts)), max(map(len, completions))
    pad = tip_tok.pad_token_id or 0
    rows, masks = [], []
    for pr, co in zip(prompts, completions):
        rows.append([pad] * (p - len(pr)) + pr + co + [pad] * (c - len(co)))
        masks.append([0] * (p - len(pr)) + [1] * (len(pr) + len(co)) + [0] * (c - len(co)))
    ids, mask = torch.tensor(rows), torch.tensor(masks)
    length = ids.shape[1] + 5
    attrs, real, _ = structured_inputs(ids, mask, p, vocab, True, length)
    dense = dense_batch_mask(tip_visible, attrs, real)[:, 0]
    mod = batch_mask_mod(tip_visible, attrs, real)
    q, k = torch.arange(length)[:, None], torch.arange(length)[None, :]
    for b, (pr, co) in enumerate(zip(prompts, completions)):
        cols = [j for j in range(ids.shape[1]) if mask[b, j]]
        oracle, _, _ = tip_oracle(pr + co, tip_tok, len(pr))
        expected = torch.eye(length, dtype=torch.bool)
        expected[torch.tensor(cols)[:, None], torch.tensor(cols)[None, :]] = oracle
        assert torch.equal(dense[b], expected)
        assert torch.equal(mod(torch.tensor(b), 0, q, k), expected)
    assert not torch.equal(dense[0], torch.ones_like(dense[0]).tril())  # kills happened
