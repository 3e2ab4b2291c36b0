"""pasta sft: learning, loss masking, resume after a kill, LoRA outputs, data errors."""

import json

import pytest
import torch

from solm.core.errors import DataError, SolmError
from solm.core.structure import IGNORE
from solm.train.collator import PastaCollator
from solm.train.data import load_sft_rows
from solm.train.sft import PastaSFTConfig, PastaSFTTrainer

ANNOTATED = ('Tips:\n1. Sleep:<promise topic="sleep" tokens="1"/><async> Get 8 hours.</async>\n'
             '2. Eat:<promise topic="eat" tokens="1"/><async> Eat vegetables.</async>\n'
             '<sync/>Done.')
ROWS = [
    {"id": "a", "prompt": "Give me tips", "response": "x", "annotated": ANNOTATED},
    {"id": "b", "prompt": "Say hi", "response": "Hi there, nice to meet you!", "annotated": None},
    {"id": "c", "prompt": "List two colours", "response": "x",
     "annotated": '1.<promise topic="red" tokens="1"/><async> Red.</async>\n'
                  '2.<promise topic="blue" tokens="1"/><async> Blue.</async><sync/>'},
]


def run_sft(cfg, on_log=None):
    return PastaSFTTrainer(cfg, on_log=on_log).train()


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sequence_loss(model, tokenizer, row) -> float:
    from solm.core.systems.pasta import PastaVocab
    col = PastaCollator(tokenizer, PastaVocab.from_tokenizer(tokenizer))
    with torch.no_grad():
        return model(**col([row])).loss.item()


def config(tmp_path, data, model, **kw):
    base = dict(data=str(data), out=str(tmp_path / "out"), model=model, learning_rate=3e-3,
                max_steps=6, batch_size=1, eval_rows=0, save_every=100, logging_steps=1,
                quiet=True)
    return PastaSFTConfig(**{**base, **kw})


def test_training_lowers_the_loss_on_its_example(tmp_path, tiny_folder):
    from solm.core.models import load_model

    data = write_rows(tmp_path / "one.jsonl", [ROWS[0]])
    before_model, tok = load_model(tiny_folder, dtype="fp32", device="cpu", system="pasta")
    row = {"prompt": ROWS[0]["prompt"], "text": ANNOTATED}
    before = sequence_loss(before_model, tok, row)
    meta = run_sft(config(tmp_path, data, tiny_folder))
    after_model, tok2 = load_model(tmp_path / "out", dtype="fp32", device="cpu")
    after = sequence_loss(after_model, tok2, row)
    assert after < before - 0.5, (before, after)
    assert meta["results"]["global_steps"] == 6
    saved = json.loads((tmp_path / "out" / "solm.json").read_text())
    assert saved["system"] == "pasta" and saved["format"] == "full"
    assert saved["parent_model"] == tiny_folder and len(saved["data"]["sha256"]) == 64
    assert (tmp_path / "out" / "loss.png").stat().st_size > 0


def test_prompt_ignored_and_padding_positions_carry_no_loss(pasta_tokenizer, vocab, tiny):
    """Gradient of the model's loss w.r.t. its logits is zero exactly where structure() says
    nothing is predicted: prompt, `</async>` ends of blocks, padding."""
    col = PastaCollator(pasta_tokenizer, vocab)
    rows = [{"prompt": r["prompt"], "text": r["annotated"] or r["response"]} for r in ROWS[:2]]
    batch = col(rows)
    out = tiny(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
               attention_mask=batch["attention_mask"])
    logits = out.logits.detach().requires_grad_(True)
    loss = tiny.loss_function(logits, batch["labels"], vocab_size=logits.shape[-1])
    loss.backward()
    carries = logits.grad.abs().sum(-1) > 0  # [B, T]
    for i, row in enumerate(rows):
        ex = col.encode(row)
        expected = torch.zeros(batch["input_ids"].shape[1], dtype=torch.bool)
        expected[: len(ex.targets)] = torch.tensor(ex.targets) != IGNORE
        assert carries[i].equal(expected)
        assert not carries[i, : ex.prompt_len - 1].any()  # prompt: no loss
    ex0 = col.encode(rows[0])
    closes = [j for j, t in enumerate(ex0.input_ids) if t == vocab.async_close]
    assert closes and not carries[0, closes].any()  # a block's end predicts nothing
    # padding changes nothing: row 1 alone has the same per-token loss as in the batch
    alone = col([rows[1]])
    t = alone["input_ids"].shape[1]
    assert t < batch["input_ids"].shape[1]
    with torch.no_grad():
        single = tiny(**alone).logits[0]
    assert (single - out.logits[1, :t]).abs().max() < 1e-4


def test_control_token_loss_weight_counts_control_targets_w_times(pasta_tokenizer, vocab, tiny):
    """Weight 1 is the model's own loss; weight w multiplies exactly the control-token
    targets' terms while training; evaluation stays unweighted."""
    from solm.train.losses import weighted_token_loss

    col = PastaCollator(pasta_tokenizer, vocab)
    rows = [{"prompt": r["prompt"], "text": r["annotated"] or r["response"]} for r in ROWS]
    batch = col(rows)
    labels = batch.pop("labels")
    tiny.train()
    with torch.no_grad():
        out = tiny(**batch)
        own = tiny(**batch, labels=labels).loss
        assert torch.allclose(weighted_token_loss(tiny, vocab.control_ids, 1.0)(out, labels), own)
        target = labels[:, 1:].reshape(-1)
        ce = torch.nn.functional.cross_entropy(
            out.logits[:, :-1].reshape(-1, out.logits.shape[-1]), target,
            ignore_index=IGNORE, reduction="none")
        control = torch.isin(target, torch.tensor(vocab.control_ids))
        assert control.sum() >= 6  # promises, closers, sync are targets here
        expected = (ce.sum() + 2.0 * ce[control].sum()) / (target != IGNORE).sum()
        weighted = weighted_token_loss(tiny, vocab.control_ids, 3.0)(out, labels)
        assert torch.allclose(weighted, expected) and weighted > own
        tiny.eval()
        assert torch.allclose(weighted_token_loss(tiny, vocab.control_ids, 3.0)(out, labels), own)


def killed_at_step_3(cfg) -> None:
    """A run of `cfg` interrupted during step 3 (its checkpoint-2 written)."""
    def kill(entry):
        if entry["step"] == 3 and "loss" in entry:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sft(cfg, on_log=kill)


def test_resume_after_a_kill_ends_where_an_uninterrupted_run_ends(tmp_path, tiny_folder):
    from safetensors.torch import load_file

    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    straight = config(tmp_path / "a", data, tiny_folder, max_steps=4, save_every=2)
    run_sft(straight)

    killed = config(tmp_path / "b", data, tiny_folder, max_steps=4, save_every=2)

    killed_at_step_3(killed)
    assert not (tmp_path / "b" / "out" / "solm.json").exists()
    meta = run_sft(killed)
    assert meta["results"]["resumed_from"].endswith("checkpoint-2")
    assert meta["results"]["global_steps"] == 4
    assert meta["results"]["steps_this_run"] == 4 - 2  # the checkpoint had taken two
    a = load_file(tmp_path / "a" / "out" / "model.safetensors")
    b = load_file(tmp_path / "b" / "out" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    with pytest.raises(SolmError, match="already holds a finished model"):
        run_sft(killed)


@pytest.mark.parametrize("change", [{"max_steps": 6}, {"max_steps": -1, "epochs": 3.0}])
def test_a_resumed_run_refuses_a_changed_schedule_and_keeps_its_checkpoint(tmp_path,
                                                                          tiny_folder, change):
    """A checkpoint started for 4 steps resumed for 6 (or for epochs) would decay its
    learning rate over the old total: refused, naming the checkpoint, and the checkpoint is
    still there to resume with the settings it was started with."""
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    first = config(tmp_path / "b", data, tiny_folder, max_steps=4, save_every=2)

    killed_at_step_3(first)
    changed = config(tmp_path / "b", data, tiny_folder, save_every=2, **change)
    asked = "--max-steps 6" if change["max_steps"] > 0 else "--epochs 3"
    with pytest.raises(SolmError, match=f"checkpoint-2.*4 steps.*{asked}"):
        run_sft(changed)
    assert (tmp_path / "b" / "out" / "checkpoints" / "checkpoint-2").is_dir()
    meta = run_sft(first)
    assert meta["results"]["global_steps"] == 4 and meta["results"]["steps_this_run"] == 2


def test_lora_adapter_and_merged_outputs_load_to_the_same_model(tmp_path, tiny_folder):
    from solm.core.models import load_model
    from solm.core.systems.pasta import PastaVocab

    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    run_sft(config(tmp_path / "adapter", data, tiny_folder, lora_r=4, max_steps=3))
    run_sft(config(tmp_path / "merged", data, tiny_folder, lora_r=4, max_steps=3, merge=True))
    assert (tmp_path / "adapter" / "out" / "adapter_config.json").exists()
    from safetensors import safe_open
    with safe_open(str(tmp_path / "adapter" / "out" / "adapter_model.safetensors"), "pt") as f:
        # only the control tokens' rows are saved, not the whole (resized) embeddings
        assert not [k for k in f.keys() if "base_layer" in k]
        assert any("trainable_tokens_delta" in k for k in f.keys())
    meta = json.loads((tmp_path / "merged" / "out" / "solm.json").read_text())
    assert meta["format"] == "lora-merged"
    base, _ = load_model(tiny_folder, dtype="fp32", device="cpu", system="pasta")
    adapter, tok = load_model(str(tmp_path / "adapter" / "out"), dtype="fp32", device="cpu")
    merged, _ = load_model(str(tmp_path / "merged" / "out"), dtype="fp32", device="cpu")
    batch = PastaCollator(tok, PastaVocab.from_tokenizer(tok))(
        [{"prompt": "Give me tips", "text": ANNOTATED}])
    del batch["labels"]
    with torch.no_grad():
        la, lm, lb = (m(**batch).logits for m in (adapter, merged, base))
    assert (la - lm).abs().max() < 1e-4
    assert (la - lb).abs().max() > 1e-3  # the adapter changed something
    # the control-token rows trained although the embedding matrix has no adapter
    ids = PastaVocab.from_tokenizer(tok).control_ids
    emb_moved = (merged.get_input_embeddings().weight[ids]
                 - base.get_input_embeddings().weight[ids]).abs().max()
    assert emb_moved > 0


def test_baseline_sft_trains_on_the_stripped_text(tmp_path, tiny_folder):
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    rows = load_sft_rows(data, strip_annotations=True)
    assert not any("<promise" in r["text"] or "<sync/>" in r["text"] for r in rows)
    meta = run_sft(config(tmp_path / "base", data, tiny_folder, strip_annotations=True,
                          max_steps=1, max_len=60, eval_rows=1))
    assert meta["system"] == "baseline" and meta["data"]["tagged_train_rows"] == 0
    pasta = run_sft(config(tmp_path / "pasta", data, tiny_folder, max_steps=1, max_len=60,
                           eval_rows=1))
    # the length filter and the held-out split pick the same rows for both systems
    assert meta["data"]["skipped_too_long"] == pasta["data"]["skipped_too_long"] > 0
    assert meta["data"]["train_rows"] == pasta["data"]["train_rows"]


def test_bad_rows_name_file_line_and_field(tmp_path):
    bad = dict(ROWS[0], annotated='<promise topic="x" tokens="1"/>no block')
    path = write_rows(tmp_path / "bad.jsonl", [ROWS[1], bad])
    with pytest.raises(DataError, match=r"bad.jsonl:2 \[field 'annotated'\]"):
        load_sft_rows(path)
    path = write_rows(tmp_path / "noprompt.jsonl", [ROWS[1], {"response": "hi"}])
    with pytest.raises(DataError, match=r"noprompt.jsonl:2 \[field 'prompt'\]"):
        load_sft_rows(path)


def test_long_rows_are_skipped_not_truncated(tmp_path, tiny_folder):
    long_row = dict(ROWS[1], id="long", response="word " * 400)
    data = write_rows(tmp_path / "rows.jsonl", ROWS + [long_row])
    meta = run_sft(config(tmp_path, data, tiny_folder, max_len=128, max_steps=1))
    assert meta["data"]["skipped_too_long"] == 1 and meta["data"]["rows"] == 3


@pytest.mark.slow
def test_embedded_model_training_forward_equals_runtime_replay():
    """The consistency acceptance check on the real model (fp32)."""
    from solm.core.chat import prompt_ids, text_ids
    from solm.core.models import load_model
    from solm.core.systems.pasta import PastaVocab
    from solm.decode.pasta.runtime import PastaRuntime

    model, tok = load_model("smollm2-135m", dtype="fp32", device="cpu", system="pasta")
    col = PastaCollator(tok, PastaVocab.from_tokenizer(tok))
    rows = [{"prompt": r["prompt"], "text": r["annotated"] or r["response"]} for r in ROWS]
    batch = col(rows)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                       attention_mask=batch["attention_mask"]).logits
    rt = PastaRuntime(model, tok, pool_size=512)
    worst = 0.0
    for i, row in enumerate(rows):
        prompt = prompt_ids(tok, row["prompt"])
        res = rt.replay(prompt, text_ids(tok, row["text"]) + [tok.eos_token_id],
                        record_logits=True)
        got = logits[i, len(prompt):len(prompt) + len(res.ids)]
        worst = max(worst, (got - res.logits).abs().max().item())
    assert worst < 1e-4, worst


def test_cli_sft_then_decode_loads_the_checkpoint_and_stats_reads_it(tmp_path, tiny_folder):
    from typer.testing import CliRunner

    from solm.cli import pasta

    runner = CliRunner()
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    out = tmp_path / "ckpt"
    r = runner.invoke(pasta.app, ["sft", "--data", str(data), "--out", str(out), "--model",
                                  tiny_folder, "--max-steps", "1", "--batch-size", "1",
                                  "--eval-rows", "1", "--quiet"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["train_rows"] == 2
    prompts = write_rows(tmp_path / "prompts.jsonl", [{"id": "p1", "prompt": "Name a fruit"}])
    decoded = tmp_path / "decoded.jsonl"
    r = runner.invoke(pasta.app, ["decode", "--model", str(out), "--prompts", str(prompts),
                                  "--out", str(decoded), "--max-new-tokens", "6", "--quiet"])
    assert r.exit_code == 0, r.output
    row = json.loads(decoded.read_text())
    assert {"promises", "parallelism", "critical_path"} <= row.keys()
    r = runner.invoke(pasta.app, ["stats", str(decoded), "--quiet"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[str(decoded)]["rows"] == 1
    r = runner.invoke(pasta.app, ["sft", "--data", str(tmp_path / "missing.jsonl"), "--out",
                                  str(tmp_path / "x"), "--model", tiny_folder])
    assert r.exit_code == 1 and "missing.jsonl" in r.output


def test_control_token_rows_take_scaled_steps_and_other_rows_do_not(pasta_tokenizer, vocab):
    from solm.core.models import tiny_model
    from solm.train.callbacks import ControlTokenLrScale

    rows = [{"prompt": "Give me tips", "text": ANNOTATED}]
    batch = PastaCollator(pasta_tokenizer, vocab)(rows)
    steps = {}
    for scale in (1.0, 5.0):
        model, _ = tiny_model(pasta_tokenizer, seed=3)
        emb = model.get_input_embeddings().weight
        start = emb.detach().clone()
        cb = ControlTokenLrScale(model, vocab.control_ids, scale)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        model(**batch).loss.backward()
        cb.on_pre_optimizer_step(None, None, None)
        opt.step()
        cb.on_optimizer_step(None, None, None)
        steps[scale] = emb.detach() - start
    ids = vocab.control_ids
    others = torch.ones(steps[1.0].shape[0], dtype=torch.bool)
    others[ids] = False
    assert steps[1.0][ids].abs().max() > 0
    assert torch.allclose(steps[5.0][ids], 5 * steps[1.0][ids], atol=1e-7)
    assert torch.equal(steps[5.0][others], steps[1.0][others])


@pytest.mark.slow
def test_the_same_command_runs_data_parallel_under_torchrun(tmp_path, tiny_folder):
    """Two CPU processes (gloo): the Trainer splits batches, accumulation halves."""
    import os
    import subprocess
    import sys

    data = write_rows(tmp_path / "rows.jsonl", ROWS * 4)
    out = tmp_path / "ddp"
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    r = subprocess.run([torchrun, "--nproc_per_node", "2", "-m", "solm.cli.main", "pasta", "sft",
                        "--data", str(data), "--model", tiny_folder, "--out", str(out),
                        "--max-steps", "2", "--batch-size", "4", "--eval-rows", "2", "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    meta = json.loads((out / "solm.json").read_text())
    assert meta["effective"]["world_size"] == 2
    assert meta["effective"]["gradient_accumulation_steps"] == 2
    assert meta["results"]["global_steps"] == 2
