"""tip sft: --registers reaches the tokenizer, the vocab and solm.json; the Dense baseline
trains on the same rows without registers under a causal mask; bad rows name file, line and
field."""

import json

import pytest
import torch

from solm.core.errors import DataError
from solm.train.tip_sft import TipCollator, TipSFTConfig, TipSFTTrainer, load_tip_rows

TRACE = ("<reg_0>Take 12 apples. <reg_1>Take 7 pears. <reg_0>Eat 12 now, so 7 are left. "
         "<reg_1>The answer is $\\boxed{7}$.")


def write_rows(path, n=6, text=TRACE):
    path.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"Problem {i}?",
                                        "annotated": text}) + "\n" for i in range(n)))
    return path


def test_rows_beyond_the_registers_name_file_line_and_field(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "p", "annotated": "<reg_0>a"}) + "\n" +
                    json.dumps({"prompt": "p", "annotated": "<reg_0>a <reg_2>b"}) + "\n")
    with pytest.raises(DataError) as e:
        load_tip_rows(str(path), registers=2, strip=False, math_prompt=True)
    assert "rows.jsonl" in str(e.value) and ":2" in str(e.value) and "annotated" in str(e.value)
    path.write_text(json.dumps({"prompt": "p", "response": "plain"}) + "\n")
    with pytest.raises(DataError, match="annotated"):
        load_tip_rows(str(path), registers=2, strip=False, math_prompt=True)


def test_dense_rows_are_the_same_traces_without_registers(tmp_path):
    path = write_rows(tmp_path / "rows.jsonl")
    tip = load_tip_rows(str(path), 2, strip=False, math_prompt=True)
    dense = load_tip_rows(str(path), 2, strip=True, math_prompt=True)
    assert [r["id"] for r in tip] == [r["id"] for r in dense]
    assert all("<reg_" not in r["text"] for r in dense)
    assert all(d["text"] == t["text"].replace("<reg_0>", "").replace("<reg_1>", "")
               for d, t in zip(dense, tip))
    assert tip[0]["prompt"].endswith("\\boxed{}.") and tip[0]["prompt"].startswith("Problem 0?")


def test_collator_hides_a_killed_step_and_dense_is_causal(tip_tok):
    from solm.core.systems.tip import TipVocab

    from conftest import TIP_REGISTERS
    vocab = TipVocab.from_tokenizer(tip_tok, TIP_REGISTERS)
    collator = TipCollator(tip_tok, vocab)
    ex = collator.encode({"prompt": "P", "text": TRACE})
    ids = ex.input_ids
    regs = [i for i, t in enumerate(ids) if t in vocab.registers]
    first_step = range(regs[0], regs[1])  # <reg_0>Take 12 apples.
    reuse = regs[2]  # the second <reg_0> kills it
    assert ex.visible[reuse - 1, list(first_step)].all()
    assert not ex.visible[reuse:, list(first_step)].any()
    assert ex.visible[reuse:regs[3], regs[1]].all()  # the <reg_1> step lives on ...
    assert not ex.visible[regs[3]:, regs[1]].any()  # ... until <reg_1> is reused
    plain = collator.encode({"prompt": "P", "text": "Take 12 apples. Eat 12 now."})
    t = len(plain.input_ids)
    assert plain.visible.equal(torch.ones(t, t, dtype=torch.bool).tril())
    # targets: next token, prompt positions ignored, the last prompt token predicts the first
    # response token
    assert ex.targets[ex.prompt_len - 1] == ids[ex.prompt_len]
    assert all(x == -100 for x in ex.targets[:ex.prompt_len - 1])


@pytest.mark.parametrize("strip", [False, True])
def test_registers_reach_the_tokenizer_and_solm_json(tmp_path, tiny_folder, strip):
    from solm.core.models import load_model
    from solm.core.systems.tip import TipVocab

    data = write_rows(tmp_path / "rows.jsonl", n=6)
    out = tmp_path / ("dense" if strip else "tip")
    cfg = TipSFTConfig(data=str(data), model=tiny_folder, out=str(out), registers=3,
                       strip_registers=strip, max_steps=2, batch_size=2, eval_rows=2,
                       lora_r=4, learning_rate=1e-3, precision="fp32", quiet=True)
    meta = TipSFTTrainer(cfg).train()
    assert meta["num_registers"] == 3 and meta["system"] == ("dense" if strip else "tip")
    assert meta["data"]["rows"] == 6 and meta["data"]["strip_registers"] is strip
    saved = json.loads((out / "solm.json").read_text())
    assert saved["num_registers"] == 3
    model, tok = load_model(str(out), dtype="fp32", device="cpu")
    vocab = tok.get_vocab()
    assert all(f"<reg_{i}>" in vocab for i in range(3)) and "<reg_3>" not in vocab
    assert TipVocab.from_tokenizer(tok, 3).num_registers == 3
    assert model.get_input_embeddings().weight.shape[0] == len(tok)


def test_tip_and_dense_keep_the_same_rows_by_the_annotated_length(tmp_path, tip_tok):
    """The length filter reads the register-annotated trace for both TIP and its Dense
    baseline, so a row that fits only without its registers is skipped by both."""
    from solm.core.chat import prompt_ids, text_ids
    from solm.core.systems.tip import TipVocab

    from conftest import TIP_REGISTERS
    short = "<reg_0>Take 12. <reg_1>Eat 12."
    long = "".join(f"<reg_{i % 2}>x{i}." for i in range(12))
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "prompt": "P", "annotated": t}) + "\n"
                            for i, t in enumerate([short, long, short, long])))
    vocab = TipVocab.from_tokenizer(tip_tok, TIP_REGISTERS)

    plain_long = long
    for i in range(TIP_REGISTERS):
        plain_long = plain_long.replace(f"<reg_{i}>", "")
    # a cap at the long row's length without registers (prompt + trace + EOS)
    rows = load_tip_rows(str(path), TIP_REGISTERS, strip=False, math_prompt=False)
    prompt_len = len(prompt_ids(tip_tok, rows[0]["prompt"]))
    annotated_len = prompt_len + len(text_ids(tip_tok, long)) + 1
    plain_len = prompt_len + len(text_ids(tip_tok, plain_long)) + 1
    assert plain_len < annotated_len
    kept = {}
    for strip in (False, True):
        cfg = TipSFTConfig(data=str(path), model="unused", out=str(tmp_path / "o"),
                           registers=TIP_REGISTERS, strip_registers=strip, max_len=plain_len,
                           eval_rows=0, math_prompt=False)
        trainer = TipSFTTrainer(cfg)
        data = trainer.prepare_data(trainer.read_data(), tip_tok, vocab)
        kept[strip] = sorted(r["id"] for r in data.train + data.eval)
        assert data.meta["skipped_too_long"] == 2
    assert kept[False] == kept[True] == ["r0", "r2"]


def test_the_reuse_count_is_over_the_training_rows(tmp_path, tip_tok):
    """meta's train_rows_reusing_a_register counts the training rows whose trace reuses a
    register (counted here from the rows the split kept for training)."""
    import re

    from solm.core.systems.tip import TipVocab

    from conftest import TIP_REGISTERS
    reuse, fresh = "<reg_0>Take 12. <reg_0>Eat 12.", "<reg_0>Take 12. <reg_1>Eat 12."
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "prompt": "P", "annotated": t}) + "\n"
                            for i, t in enumerate([reuse, fresh] * 5)))
    cfg = TipSFTConfig(data=str(path), model="unused", out=str(tmp_path / "o"),
                       registers=TIP_REGISTERS, eval_rows=4, math_prompt=False)
    trainer = TipSFTTrainer(cfg)
    data = trainer.prepare_data(trainer.read_data(), tip_tok,
                                TipVocab.from_tokenizer(tip_tok, TIP_REGISTERS))

    def reuses(text):
        regs = re.findall(r"<reg_(\d+)>", text)
        return len(regs) != len(set(regs))

    assert data.meta["train_rows_reusing_a_register"] == sum(reuses(r["text"])
                                                             for r in data.train)
    assert sum(reuses(r["text"]) for r in data.train) != sum(reuses(r["text"])
                                                             for r in data.eval)
