"""BoNBoN: the loss is the paper's closed form on summed log-probs; its best-of-n target is
(n - 1) H_{n-1}, checked against a simulation of the order statistics it comes from; the
reference is the frozen parent (its log-probs computed once, untouched by training); pairs
files are validated with file:line:field errors."""

import json

import pytest
import torch

from solm.core.chat import prompt_ids, text_ids
from solm.core.errors import DataError
from solm.train.bonbon import (BonbonConfig, BonbonTrainer, PairCollator, bonbon_loss,
                               ipo_target, load_pairs)


def order_statistic_margin(n: int, draws: int = 400_000) -> float:
    """(n - 1) E[log U_(n) - log U_(1)] for n uniforms, by simulation: the best-of-n log
    density ratio, best minus worst (the rule the target comes from, read another way)."""
    g = torch.Generator().manual_seed(0)
    u = torch.rand(draws, n, generator=g, dtype=torch.float64)
    return float((n - 1) * (u.max(1).values.log() - u.min(1).values.log()).mean())


@pytest.mark.parametrize("n", [2, 4, 10])
def test_the_target_is_the_best_of_n_margin(n):
    assert ipo_target(n) == pytest.approx((n - 1) * sum(1 / k for k in range(1, n)))
    assert ipo_target(n) == pytest.approx(order_statistic_margin(n), rel=0.02)


def test_n_below_two_has_no_target():
    with pytest.raises(ValueError):
        ipo_target(1)


def test_the_loss_is_the_closed_form_on_a_toy_batch():
    # pair 1: h = (-10 + 11) - (-12 + 11) = 2, n = 4: T = 3 * (1 + 1/2 + 1/3) = 5.5
    # pair 2: h = (-20 + 20) - (-30 + 25) = 5, n = 2: T = 1
    pc, pr = torch.tensor([-10.0, -20.0]), torch.tensor([-12.0, -30.0])
    rc, rr = torch.tensor([-11.0, -20.0]), torch.tensor([-11.0, -25.0])
    n, alpha = torch.tensor([4, 2]), 0.005
    loss, parts = bonbon_loss(pc, pr, rc, rr, n, alpha)
    by_hand = [alpha * 10 + (1 - alpha) * (2 - 5.5) ** 2,
               alpha * 20 + (1 - alpha) * (5 - 1) ** 2]
    assert loss.item() == pytest.approx(sum(by_hand) / 2)
    assert parts["margin"].item() == pytest.approx(3.5)


ANSWERS = ["Sleep well and drink water.", "Eat greens.", "Walk every day, it helps a lot.",
           "No."]


def write_pairs(path, tok, rows=6):
    with open(path, "w") as f:
        for i in range(rows):
            c, r = ANSWERS[i % 4], ANSWERS[(i + 1) % 4]
            f.write(json.dumps({"id": f"p{i}", "prompt": f"Give me tip {i}.", "n": 2 + i % 3,
                                "chosen": {"ids": text_ids(tok, c), "forced": [], "ended": True,
                                           "text": c},
                                "rejected": {"ids": text_ids(tok, r), "forced": [],
                                             "ended": i % 2 == 0, "text": r}}) + "\n")


def plain_summed_logprobs(model, tok, prompt, answer, ended):
    """The oracle for answers without tags: a plain causal forward, log-softmax summed over
    the answer's tokens (and its end-of-sequence token when it ended)."""
    p = prompt_ids(tok, prompt)
    a = text_ids(tok, answer) + ([tok.eos_token_id] if ended else [])
    ids = torch.tensor([p + a])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
    return sum(logp[len(p) - 1 + j, t].item() for j, t in enumerate(a))


def test_the_collated_pairs_give_the_summed_logprobs(tiny, pasta_tokenizer, vocab, tmp_path):
    from solm.train.sequence_logprobs import sequence_logprobs

    tok = pasta_tokenizer
    path = tmp_path / "pairs.jsonl"
    write_pairs(path, tok, rows=2)
    rows = load_pairs(str(path))
    batch = PairCollator(tok, vocab, tok.eos_token_id, 0)(rows)
    with torch.no_grad():
        got = sequence_logprobs(tiny, batch)
    expected = [plain_summed_logprobs(tiny, tok, r["prompt"], r["text"], True) for r in rows]
    for i, r in enumerate(rows):
        rej = ANSWERS[(i + 1) % 4]
        expected.append(plain_summed_logprobs(tiny, tok, r["prompt"], rej,
                                              r["rejected"]["ended"]))
    assert torch.allclose(got, torch.tensor(expected), atol=1e-3, rtol=1e-5)


def test_an_answer_ended_at_once_is_its_end_token_alone(tiny, pasta_tokenizer, vocab,
                                                        tmp_path):
    """A sample the model ended at once (no token, then EOS) is a real worst sample: it
    loads, and its log-prob is that of EOS right after the prompt."""
    from solm.train.sequence_logprobs import sequence_logprobs

    tok = pasta_tokenizer
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({
        "id": "a", "prompt": "Give me a tip.", "n": 4,
        "chosen": {"ids": text_ids(tok, ANSWERS[0]), "forced": [], "ended": True},
        "rejected": {"ids": [], "forced": [], "ended": True}}) + "\n")
    rows = load_pairs(str(path))
    with torch.no_grad():
        got = sequence_logprobs(tiny, PairCollator(tok, vocab, tok.eos_token_id, 0)(rows))
    expected = [plain_summed_logprobs(tiny, tok, "Give me a tip.", ANSWERS[0], True),
                plain_summed_logprobs(tiny, tok, "Give me a tip.", "", True)]
    assert torch.allclose(got, torch.tensor(expected), atol=1e-3, rtol=1e-5)


def test_training_moves_the_policy_and_not_the_reference(tmp_path, tiny_folder):
    """The reference gets no gradient: its log-probs stay the parent's after training, and
    the held-out margin (policy minus reference) starts at 0 and moves."""
    from solm.core.models import load_model
    from solm.core.systems.pasta import PastaVocab
    from solm.core.vocabulary import add_control_tokens
    from solm.train.sequence_logprobs import sequence_logprobs

    import shutil
    parent_dir = tmp_path / "parent"
    shutil.copytree(tiny_folder, parent_dir)
    (parent_dir / "generation_config.json").write_text(
        json.dumps({"do_sample": False, "repetition_penalty": 1.37}))
    tiny_folder = str(parent_dir)
    parent, tok = load_model(tiny_folder, dtype="fp32", device="cpu")
    add_control_tokens(parent, tok, "pasta")
    vocab = PastaVocab.from_tokenizer(tok)
    path = tmp_path / "pairs.jsonl"
    write_pairs(path, tok)
    cfg = BonbonConfig(out=str(tmp_path / "out"), model=tiny_folder, data=str(path),
                       learning_rate=1e-2, epochs=2, batch_size=2, eval_rows=2,
                       eval_every=2, quiet=True, precision="fp32")
    trainer = BonbonTrainer(cfg)
    seen = {}
    original = trainer.before_training

    def spy(model, tokenizer, vocab_, data, args):
        original(model, tokenizer, vocab_, data, args)
        seen["rows"] = data.train + data.eval
    trainer.before_training = spy
    meta = trainer.train()
    rows = seen["rows"]
    collate = PairCollator(tok, vocab, tok.eos_token_id, 0)
    with torch.no_grad():
        fresh = sequence_logprobs(parent, collate(rows))
    # the reference log-probs are the parent's, whatever training did afterwards
    k = len(rows)
    assert torch.allclose(torch.tensor([r["ref_chosen"] for r in rows]), fresh[:k], atol=1e-4)
    assert torch.allclose(torch.tensor([r["ref_rejected"] for r in rows]), fresh[k:],
                          atol=1e-4)
    trained, _ = load_model(str(tmp_path / "out"), dtype="fp32", device="cpu")
    with torch.no_grad():
        after = sequence_logprobs(trained, collate(rows))
    assert not torch.allclose(after, fresh, atol=1e-3)  # the policy moved
    # the reference is frozen, not the live policy: the held-out margin starts at 0 (policy
    # = reference before the first step) and does not stay there (a live one would)
    log = [json.loads(x) for x in open(tmp_path / "out" / "train_log.jsonl")]
    margins = [e["eval_margin"] for e in log if "eval_margin" in e]
    assert len(margins) >= 2
    assert abs(margins[0]) < 1e-3 and abs(margins[-1]) > 1e-2
    # on the pairs it trained on, the margin moved towards the (positive) target
    n_train = k - 2
    h = (after[:k] - fresh[:k]) - (after[k:] - fresh[k:])
    assert h[:n_train].mean() > 0.5
    assert meta["data"]["ipo_target_by_n"] == {"2": 1.0, "3": 3.0, "4": 5.5}
    # the parent's decoding defaults travel with the child
    saved = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert saved["repetition_penalty"] == 1.37


@pytest.mark.parametrize("row,field", [
    ({"prompt": "", "n": 2}, "prompt"),
    ({"prompt": "x", "n": 1}, "n"),
    ({"prompt": "x", "n": 2, "chosen": {"ids": [], "ended": False}}, "chosen.ids"),
    ({"prompt": "x", "n": 2, "chosen": {"ids": ["a"]}}, "chosen.ids"),
    ({"prompt": "x", "n": 2, "chosen": {"ids": [-5, 3]}}, "chosen.ids"),  # was blamed on forced
    ({"prompt": "x", "n": 2, "chosen": {"ids": [1, True]}}, "chosen.ids"),
    ({"prompt": "x", "n": 2, "chosen": {"ids": [1, 2], "forced": [5]}}, "chosen.forced"),
    ({"prompt": "x", "n": 2, "chosen": {"ids": [1]}, "rejected": {"ids": [2], "ended": "y"}},
     "rejected.ended"),
])
def test_a_bad_pairs_row_is_named_by_line_and_field(tmp_path, row, field):
    path = tmp_path / "pairs.jsonl"
    good = {"prompt": "ok", "n": 2, "chosen": {"ids": [1]}, "rejected": {"ids": [2]}}
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError) as e:
        load_pairs(str(path))
    assert e.value.line == 2 and e.value.field == field


def _pairs_file(path, model=None, offset=0):
    row = {"prompt": "ok", "n": 2, "chosen": {"ids": [1 + offset, 2]},
           "rejected": {"ids": [3], "ended": True}}
    if model is not None:
        row["model"] = model
    path.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    return str(path)


def test_the_reference_defaults_to_the_model_the_pairs_were_sampled_from(tmp_path):
    """`pasta bonbon` once defaulted --model to smollm2-135m whatever sampled the pairs."""
    from solm.core.errors import SolmError

    named = _pairs_file(tmp_path / "named.jsonl", model="runs/r1/pasta-sft")
    trainer = BonbonTrainer(BonbonConfig(out=str(tmp_path / "o1"), data=named, quiet=True))
    trainer.check()
    assert trainer.config.model == "runs/r1/pasta-sft" and not trainer.notices
    other = BonbonTrainer(BonbonConfig(out=str(tmp_path / "o2"), data=named,
                                       model="smollm2-135m", quiet=True))
    other.check()
    assert "not the model the pairs were sampled from (runs/r1/pasta-sft)" in other.notices[0]
    # an older pairs file: the prefs folder's manifest names the sampler
    folder = tmp_path / "prefs"
    folder.mkdir()
    old = _pairs_file(folder / "pairs.jsonl")
    (folder / "solm_manifest.json").write_text(json.dumps({"model": "pasta-sft-cpu"}))
    t = BonbonTrainer(BonbonConfig(out=str(tmp_path / "o3"), data=old, quiet=True))
    t.check()
    assert t.config.model == "pasta-sft-cpu"
    anonymous = _pairs_file(tmp_path / "anon.jsonl")
    with pytest.raises(SolmError, match="do not name the model they were sampled from"):
        BonbonTrainer(BonbonConfig(out=str(tmp_path / "o4"), data=anonymous,
                                   quiet=True)).check()


def test_token_ids_outside_the_tokenizer_are_named_not_an_index_error(tmp_path,
                                                                      pasta_tokenizer, vocab):
    """Ids + 60000 ended in a 400-line traceback (`index out of range in self`)."""
    path = _pairs_file(tmp_path / "far.jsonl", model="m", offset=len(pasta_tokenizer))
    trainer = BonbonTrainer(BonbonConfig(out=str(tmp_path / "o"), data=path, model="m",
                                         eval_rows=0, quiet=True))
    with pytest.raises(DataError) as e:
        trainer.prepare_data(load_pairs(path), pasta_tokenizer, vocab)
    assert (e.value.line, e.value.field) == (1, "chosen.ids")
    assert f"token id {1 + len(pasta_tokenizer)} is outside the tokenizer" in str(e.value)


def test_a_pair_is_skipped_when_its_longer_answer_does_not_fit(tmp_path, pasta_tokenizer,
                                                               vocab):
    """--max-len reads the longer answer of a pair (both are scored in one batch): a pair
    whose rejected answer overflows is skipped even though its chosen one fits."""
    from solm.core.chat import prompt_ids

    prompt_len = len(prompt_ids(pasta_tokenizer, "ok"))
    rows = [{"prompt": "ok", "n": 2, "chosen": {"ids": [1, 2]}, "rejected": {"ids": [3] * 30}},
            {"prompt": "ok", "n": 2, "chosen": {"ids": [1, 2]}, "rejected": {"ids": [3, 4]}}]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({**r, "model": "m"}) + "\n" for r in rows))
    max_len = prompt_len + 2 + 1 + 10  # the short answers fit, the 30-token one does not
    trainer = BonbonTrainer(BonbonConfig(out=str(tmp_path / "o"), data=str(path), model="m",
                                         eval_rows=0, max_len=max_len, quiet=True))
    data = trainer.prepare_data(load_pairs(str(path)), pasta_tokenizer, vocab)
    assert data.meta["skipped_too_long"] == 1 and data.meta["pairs"] == 1
    assert data.train[0]["rejected"]["ids"] == [3, 4]


def test_an_id_equal_to_the_vocabulary_size_is_outside_it(tmp_path, pasta_tokenizer, vocab):
    """Ids run 0 .. len(tokenizer) - 1: the id len(tokenizer) itself is named, not indexed."""
    path = _pairs_file(tmp_path / "edge.jsonl", model="m", offset=len(pasta_tokenizer) - 1)
    trainer = BonbonTrainer(BonbonConfig(out=str(tmp_path / "o"), data=path, model="m",
                                         eval_rows=0, quiet=True))
    with pytest.raises(DataError) as e:
        trainer.prepare_data(load_pairs(path), pasta_tokenizer, vocab)
    assert f"token id {len(pasta_tokenizer)} is outside the tokenizer" in str(e.value)
