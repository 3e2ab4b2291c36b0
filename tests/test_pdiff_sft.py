"""`pdiff sft`: the masking, the loss against its closed form, and a tiny end-to-end run."""

import json
import math
import random

import pytest
import torch

from solm.core.structure import IGNORE
from solm.train.pdiff_sft import (AR, DIFFUSION, PdiffCollator, PdiffSFTConfig,
                                  PdiffSFTTrainer, pdiff_loss, sample_masking)

ROW = {"id": "r1", "prompt": "List two fruits.",
       "text": 'Fruits: <promise topic="one" tokens="1"/><async>Apples are red.</async> and '
               '<promise topic="two" tokens="1"/><async>Pears are green.</async><sync/> Done.'}


def test_loss_equals_its_closed_form():
    torch.manual_seed(0)
    vocab, n = 7, 6
    logits = torch.randn(2, n, vocab)
    labels = torch.full((2, n), IGNORE)
    kinds = torch.zeros((2, n), dtype=torch.long)
    # row 0: AR label at 2 (scored by logits 1), masked token at 4 (scored by logits 3)
    labels[0, 2], kinds[0, 2] = 3, AR
    labels[0, 4], kinds[0, 4] = 5, DIFFUSION
    labels[0, 5], kinds[0, 5] = 1, DIFFUSION
    labels[1, 1], kinds[1, 1] = 6, AR
    labels[1, 3], kinds[1, 3] = 0, DIFFUSION
    t = torch.tensor([0.25, 0.8])
    norm = torch.tensor([5.0, 3.0])

    def nll(b, row, token):
        return -(logits[b, row, token] - torch.logsumexp(logits[b, row], 0))

    seq0 = (nll(0, 1, 3) + (nll(0, 3, 5) + nll(0, 4, 1)) / 0.25) / 5
    seq1 = (nll(1, 0, 6) + nll(1, 2, 0) / 0.8) / 3
    loss, parts = pdiff_loss(logits, labels, kinds, t, norm)
    assert torch.allclose(loss, (seq0 + seq1) / 2, atol=1e-6)
    assert parts["ar_loss"] == pytest.approx(float(nll(0, 1, 3) + nll(1, 0, 6)) / 2, abs=1e-5)
    # control-token weighting scales only the flagged AR terms
    control = torch.zeros((2, n), dtype=torch.bool)
    control[0, 2] = True
    weighted, _ = pdiff_loss(logits, labels, kinds, t, norm, control, 5.0)
    assert torch.allclose(weighted, loss + 4 * nll(0, 1, 3) / 5 / 2, atol=1e-6)


def test_held_out_losses_are_token_means_over_the_whole_evaluation():
    """The trainer's held-out AR and diffusion losses are each kind's cross-entropy averaged
    over every token of that kind in every batch (not a mean of batch means): computed here
    from raw logits, two batches of different sizes."""
    from solm.train.pdiff_sft import pdiff_trainer_class

    class Base:
        def __init__(self, *args, **kwargs):
            pass

        def log(self, logs, *args, **kwargs):
            self.logged = logs

    class Model(torch.nn.Module):
        def forward(self, input_ids, **kwargs):
            g = torch.Generator().manual_seed(int(input_ids.sum()))
            return type("Out", (), {"logits": torch.randn(*input_ids.shape, 11, generator=g)})()

    trainer = pdiff_trainer_class(Base)()
    want = {AR: [], DIFFUSION: []}
    for b, n in ((1, 5), (3, 9)):
        labels = torch.full((b, n), IGNORE)
        kinds = torch.zeros((b, n), dtype=torch.long)
        g = torch.Generator().manual_seed(n)
        for i in range(b):
            for j in range(1, n):
                kind = int(torch.randint(0, 3, (1,), generator=g))
                if kind:
                    labels[i, j], kinds[i, j] = int(torch.randint(0, 11, (1,), generator=g)), kind
        batch = {"input_ids": torch.arange(b * n).view(b, n) + n, "labels": labels,
                 "loss_kind": kinds, "loss_t": torch.full((b,), 0.5),
                 "loss_norm": torch.full((b,), float(n)), "loss_control": torch.zeros(
                     (b, n), dtype=torch.bool)}
        logits = Model()(batch["input_ids"]).logits
        for i in range(b):
            for j in range(1, n):
                if kinds[i, j]:
                    want[int(kinds[i, j])].append(float(
                        torch.logsumexp(logits[i, j - 1], 0) - logits[i, j - 1, labels[i, j]]))
        trainer.compute_loss(Model().eval(), batch)
    trainer.log({"eval_loss": 1.0})
    assert trainer.logged["eval_ar_loss"] == pytest.approx(
        sum(want[AR]) / len(want[AR]), abs=1e-4)
    assert trainer.logged["eval_diffusion_loss"] == pytest.approx(
        sum(want[DIFFUSION]) / len(want[DIFFUSION]), abs=1e-4)


def test_masking_rate_spans_eps_to_one():
    rng = random.Random(0)
    ts = [sample_masking(list(range(100)), rng, 1e-3)[0] for _ in range(2000)]
    assert 1e-3 <= min(ts) < 0.01 and 0.99 < max(ts) <= 1.0
    assert abs(sum(ts) / len(ts) - 0.5) < 0.03
    t, masked = sample_masking(list(range(10_000)), random.Random(1), 1e-3)
    assert abs(len(masked) / 10_000 - t) < 0.02


def test_collator_masks_only_chunk_content_and_labels_what_it_masked(pdiff_tok, pdiff_vocab):
    collator = PdiffCollator(pdiff_tok, pdiff_vocab, eps=0.5, seed=3)
    full, prompt_len = collator.layout(ROW, random.Random(7))
    ex = collator.encode_ids(full, prompt_len, random.Random(7))
    from solm.core.systems.pdiff import structure
    s = structure(full, pdiff_vocab)
    diffusable = [j for j in range(len(full)) if s.attrs["diffusable"][j]]
    masked = [j for j, t in enumerate(ex.input_ids) if t == pdiff_vocab.mask]
    assert masked and set(masked) <= set(diffusable)
    assert pdiff_vocab.async_open in ex.input_ids and pdiff_vocab.async_close in ex.input_ids
    assert ex.norm == sum(k == AR for k in ex.kinds) + len(diffusable)
    assert all(k == 0 for k in ex.kinds[:prompt_len])  # no loss on the prompt
    # the first response token is trained, scored from the prompt's last position (ROW's
    # answer opens with plain text, not a chunk)
    assert ex.labels[prompt_len] == full[prompt_len] and ex.kinds[prompt_len] == AR
    assert all(lab == IGNORE for lab in ex.labels[:prompt_len])
    assert sum(k == DIFFUSION for k in ex.kinds) == len(masked)
    # the AR labels are the main thread's next tokens, EOS last
    assert ex.labels[-1] == pdiff_tok.eos_token_id and ex.kinds[-1] == AR
    # held-out rows: the same masking each time
    held = {**ROW, "held_out": True}
    a, b = collator([held]), collator([held])
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["loss_t"], b["loss_t"])


def write_rows(path, n=8):
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"r{i}", "prompt": f"Question {i}?",
                                "annotated": ROW["text"]}) + "\n")
    return path


def test_pdiff_sft_trains_saves_and_decodes(tmp_path, tiny_folder):
    from solm.core.chat import prompt_ids
    from solm.core.models import load_decoder
    from solm.decode.pdiff.runtime import PdiffDecodeConfig, PdiffRuntime

    data = write_rows(tmp_path / "rows.jsonl")
    out = tmp_path / "pd"
    cfg = PdiffSFTConfig(data=str(data), model=tiny_folder, out=str(out), max_steps=2,
                         batch_size=2, eval_rows=2, lora_r=4, learning_rate=1e-3,
                         precision="fp32", quiet=True, logging_steps=1, pad_cycle=3)
    meta = PdiffSFTTrainer(cfg).train()
    assert meta["system"] == "pdiff" and meta["data"]["rows"] == 8 and meta["pad_cycle"] == 3
    logged = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert any("ar_loss" in e and "diffusion_loss" in e for e in logged)
    assert math.isfinite(meta["results"]["eval_loss_after"])
    r = meta["results"]
    assert r["diffusion_gap_after"] == pytest.approx(
        r["eval_diffusion_loss_after"] - r["eval_ar_loss_after"], abs=1e-3)
    model, tok = load_decoder(str(out), dtype="fp32", system="pdiff")
    assert "<|pdiff_pad|>" in tok.get_vocab() and "<|mdm_mask|>" in tok.get_vocab()
    # the adapter is loaded with the three pads it trained with, no more
    pads = [t for t in tok.get_vocab() if t.startswith("<|pdiff_pad")]
    assert sorted(pads) == ["<|pdiff_pad_1|>", "<|pdiff_pad_2|>", "<|pdiff_pad|>"]
    assert model.get_input_embeddings().weight.shape[0] == len(tok)
    res = PdiffRuntime(model, tok, pool_size=256).generate(
        prompt_ids(tok, "Question 1?"), PdiffDecodeConfig(max_new_tokens=40))
    assert res.forward_passes > 0


def test_pdiff_sft_refuses_rows_without_a_promise(tmp_path):
    """A TIP register file trained with `tagged_train_rows: 0` and no warning."""
    from solm.core.errors import SolmError

    tip_rows = tmp_path / "tip.jsonl"
    tip_rows.write_text("".join(json.dumps({"prompt": f"What is {i}+1?", "annotated":
                                            f"<reg_0>Add one.<reg_1>So {i + 1}."}) + "\n"
                                for i in range(4)))
    cfg = PdiffSFTConfig(data=str(tip_rows), out=str(tmp_path / "pd"), quiet=True)
    with pytest.raises(SolmError, match="no row holds a Pasta-Lang promise.*TIP traces file"):
        PdiffSFTTrainer(cfg).read_data()
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"prompt": "Hi", "response": "Hello."}) + "\n")
    with pytest.raises(SolmError, match="no chunk to learn; train on `pasta annotate`"):
        PdiffSFTTrainer(PdiffSFTConfig(data=str(plain), out=str(tmp_path / "pd"),
                                       quiet=True)).read_data()
    # one promise anywhere is enough: plain rows are still mixed in as they are today
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(plain.read_text() + json.dumps({
        "prompt": "List two.", "annotated": '<promise topic="a" tokens="1"/><async>A.</async>'
        '<sync/>'}) + "\n")
    assert len(PdiffSFTTrainer(PdiffSFTConfig(data=str(mixed), out=str(tmp_path / "pd"),
                                              quiet=True)).read_data()) == 2


def test_the_length_filter_reads_the_layout_with_the_most_extra_pads(tmp_path, pdiff_tok,
                                                                     pdiff_vocab):
    """A row that fits --max-len with few extra pads but not with --extra-pads of them is
    skipped: a draw of many pads would otherwise be cut mid-chunk in training."""
    from solm.core.chat import prompt_ids, text_ids
    from solm.core.systems.pdiff import to_slots

    prompt = len(prompt_ids(pdiff_tok, ROW["prompt"]))
    answer = text_ids(pdiff_tok, ROW["text"])
    fewest = prompt + len(to_slots(answer, pdiff_vocab, lambda: 0)) + 1
    most = prompt + len(to_slots(answer, pdiff_vocab, lambda: 10)) + 1
    assert fewest < most
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "r1", "prompt": ROW["prompt"], "annotated": ROW["text"]})
                    + "\n")
    for max_len, kept in ((most - 1, 0), (most, 1)):
        cfg = PdiffSFTConfig(data=str(data), out=str(tmp_path / "o"), max_len=max_len,
                             extra_pads=10, eval_rows=0, quiet=True)
        trainer = PdiffSFTTrainer(cfg)
        rows = trainer.read_data()
        if kept:
            prepared = trainer.prepare_data(rows, pdiff_tok, pdiff_vocab)
            assert prepared.meta["rows"] == 1 and prepared.meta["skipped_too_long"] == 0
        else:
            with pytest.raises(Exception, match="no row fits --max-len"):
                trainer.prepare_data(rows, pdiff_tok, pdiff_vocab)


def test_two_copy_training_with_a_soft_target_trains_and_records_its_layout(tmp_path,
                                                                            tiny_folder):
    """`--layout two-copy --block-size 4 --mask-max 0.8 --soft-target M`: the run trains,
    logs both losses, records the layout, the band and the teacher; the soft target moves
    the loss (the same run without it ends elsewhere); a one-copy soft target is refused."""
    from solm.core.errors import SolmError

    data = write_rows(tmp_path / "rows.jsonl")
    losses = {}
    for name, extra in (("soft", {"soft_target": tiny_folder, "soft_target_weight": 0.9}),
                        ("hard", {})):
        out = tmp_path / name
        cfg = PdiffSFTConfig(data=str(data), model=tiny_folder, out=str(out), max_steps=2,
                             batch_size=2, eval_rows=2, lora_r=4, learning_rate=1e-2,
                             precision="fp32", quiet=True, logging_steps=1, block_size=4,
                             layout="two-copy", mask_eps=0.3, mask_max=0.8, **extra)
        meta = PdiffSFTTrainer(cfg).train()
        assert meta["data"]["layout"] == "two-copy" and meta["data"]["mask_max"] == 0.8
        assert meta["settings"]["soft_target"] == extra.get("soft_target")
        logged = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
        losses[name] = [e["loss"] for e in logged if "loss" in e]
        assert any("diffusion_loss" in e for e in logged)
    assert losses["soft"] != losses["hard"]
    with pytest.raises(SolmError, match="two-copy"):
        PdiffSFTTrainer(PdiffSFTConfig(data=str(data), model=tiny_folder,
                                       out=str(tmp_path / "x"), soft_target=tiny_folder)).train()
    with pytest.raises(SolmError, match="mask-max"):
        PdiffSFTTrainer(PdiffSFTConfig(data=str(data), model=tiny_folder,
                                       out=str(tmp_path / "y"), mask_eps=0.5,
                                       mask_max=0.4)).train()
