"""Pasta-SFT and Baseline-SFT on transformers' Trainer with the structure() collator.

One code path for a laptop CPU and for many GPUs: under `accelerate launch` or `torchrun` the
Trainer runs data-parallel, and gradient accumulation keeps the global batch at `batch_size`.
Checkpoints go to OUT/checkpoints (a rerun resumes from the last one); the finished model is a
plain `save_pretrained` folder in OUT with the tokenizer, `solm.json` and a loss plot.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from solm.core.errors import SolmError
from solm.train.callbacks import ControlTokenLrScale
from solm.train.checkpoint import METADATA_FILE, read_metadata, write_metadata
from solm.train.data import load_sft_rows, split_rows


@dataclass
class SFTConfig:
    """Settings of `pasta sft`; defaults are the paper's schedule."""

    data: str
    out: str
    model: str = "smollm2-135m"
    strip_annotations: bool = False  # Baseline-SFT: train on the same rows without tags
    learning_rate: float = 1e-5  # decays linearly to 0
    epochs: float = 4.0
    max_steps: int = -1  # > 0 overrides epochs
    batch_size: int = 8  # global batch (all devices, after accumulation)
    micro_batch_size: int = 1  # rows per device per forward
    max_len: int = 2048  # rows longer than this (prompt + response tokens) are skipped
    truncate: bool = False  # ... or cut to max_len instead
    eval_rows: int = 32
    eval_every: int | None = None  # steps; None = once per epoch
    save_every: int = 50  # steps between resumable checkpoints
    lora_r: int = 0  # 0 = full finetuning
    lora_alpha: int | None = None  # default 2 * lora_r
    lora_dropout: float = 0.0
    merge: bool = False  # LoRA: save merged full weights instead of the adapter
    gradient_checkpointing: bool | None = None  # None = on for CUDA, off on CPU
    precision: str = "auto"  # auto (bf16 mixed where supported), bf16, fp32
    warmup_ratio: float = 0.0
    control_token_lr_scale: float = 10.0  # full finetuning: lr multiplier for new-token rows
    control_token_loss_weight: float = 1.0  # control-token targets count this many times
    weight_decay: float = 0.0
    seed: int = 0
    limit: int | None = None
    logging_steps: int = 5
    quiet: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def system(self) -> str:
        return "baseline" if self.strip_annotations else "pasta"


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def accumulation_steps(cfg: SFTConfig) -> int:
    per_step = cfg.micro_batch_size * world_size()
    if cfg.batch_size % per_step:
        raise SolmError(f"--batch-size {cfg.batch_size} is not a multiple of micro batch "
                        f"{cfg.micro_batch_size} x {world_size()} processes")
    return cfg.batch_size // per_step


def use_bf16(precision: str) -> bool:
    if precision == "fp32":
        return False
    cuda_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if precision == "bf16":
        if torch.cuda.is_available() and not cuda_bf16:
            raise SolmError("--precision bf16: this GPU does not support bf16")
        return True
    if precision != "auto":
        raise SolmError(f"--precision must be auto, bf16 or fp32 (got '{precision}')")
    from solm.core.models import cpu_has_fast_bf16
    return cuda_bf16 or (not torch.cuda.is_available() and cpu_has_fast_bf16())


def _wrap_lora(model, cfg: SFTConfig, control_ids: list[int]):
    """LoRA on every linear layer; the new control-token embeddings train too (they start as
    the mean embedding, which no adapter can turn into a useful tag)."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha or 2 * cfg.lora_r,
                      lora_dropout=cfg.lora_dropout, target_modules="all-linear",
                      task_type="CAUSAL_LM", trainable_token_indices=control_ids)
    return get_peft_model(model, lora)


def drop_long_rows(rows: list[dict], collator) -> tuple[list[dict], int]:
    """Rows whose prompt + response fit in max_len tokens: a truncated Pasta-Lang response
    ends inside an open block and would teach the model to stop there."""
    from solm.core.chat import prompt_ids, text_ids

    tok = collator.tokenizer
    kept = [r for r in rows if len(prompt_ids(tok, r["prompt"], r.get("system")))
            + len(text_ids(tok, r.get("longest_text", r["text"]))) + 1 <= collator.max_len]
    return kept, len(rows) - len(kept)


def _final_model_exists(out: Path) -> bool:
    meta = read_metadata(out)
    return meta is not None and meta.get("complete", False)


def run_sft(cfg: SFTConfig, on_log: Callable[[dict], None] | None = None) -> dict:
    """Train, save the final model into cfg.out and return its metadata."""
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_utils import get_last_checkpoint

    from solm.core.control_tokens import add_control_tokens
    from solm.core.jsonl import JsonlWriter
    from solm.core.models import load_model, resolve_model_path
    from solm.core.provenance import file_sha256, package_versions
    from solm.core.systems.pasta import PastaVocab
    from solm.train.collator import PastaCollator

    out = Path(cfg.out)
    if _final_model_exists(out):
        raise SolmError(f"{out} already holds a finished model ({METADATA_FILE}); "
                        f"choose another --out or delete it")
    if cfg.lora_r < 0:
        raise SolmError("--lora-r must be >= 0")
    if cfg.merge and not cfg.lora_r:
        raise SolmError("--merge applies to LoRA only (set --lora-r)")
    rows = load_sft_rows(cfg.data, strip_annotations=cfg.strip_annotations, limit=cfg.limit)
    accum = accumulation_steps(cfg)
    bf16 = use_bf16(cfg.precision)
    grad_ckpt = (torch.cuda.is_available() if cfg.gradient_checkpointing is None
                 else cfg.gradient_checkpointing)

    model, tok = load_model(cfg.model, dtype="fp32", device="cpu")
    add_control_tokens(model, tok, "pasta")
    vocab = PastaVocab.from_tokenizer(tok)
    model.config.use_cache = False
    if cfg.lora_r:
        from transformers import set_seed
        set_seed(cfg.seed)  # adapter init is random: same seed, same run
        model = _wrap_lora(model, cfg, vocab.control_ids)
    collator = PastaCollator(tok, vocab, max_len=cfg.max_len)
    rows, too_long = drop_long_rows(rows, collator) if not cfg.truncate else (rows, 0)
    if not rows:
        raise SolmError(f"{cfg.data}: every row is longer than --max-len {cfg.max_len} tokens")
    split = split_rows(rows, cfg.eval_rows, cfg.seed)

    ckpt_dir = out / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    resume = get_last_checkpoint(str(ckpt_dir))
    steps_per_epoch = max(1, math.ceil(len(split.train) / cfg.batch_size))
    eval_every = cfg.eval_every or steps_per_epoch
    args = TrainingArguments(
        output_dir=str(ckpt_dir), learning_rate=cfg.learning_rate, lr_scheduler_type="linear",
        warmup_steps=cfg.warmup_ratio, weight_decay=cfg.weight_decay,
        num_train_epochs=cfg.epochs, max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.micro_batch_size,
        per_device_eval_batch_size=cfg.micro_batch_size, gradient_accumulation_steps=accum,
        eval_strategy="steps" if split.eval else "no", eval_steps=eval_every,
        save_strategy="steps", save_steps=cfg.save_every, save_total_limit=2,
        logging_steps=cfg.logging_steps, logging_first_step=True,
        bf16=bf16, use_cpu=not torch.cuda.is_available(),
        activation_checkpointing=grad_ckpt,
        activation_checkpointing_kwargs={"use_reentrant": False} if grad_ckpt else None,
        remove_unused_columns=False, report_to="none", seed=cfg.seed, data_seed=cfg.seed,
        train_sampling_strategy="group_by_length" if cfg.micro_batch_size > 1 else "random",
        disable_tqdm=cfg.quiet, dataloader_num_workers=0,
    )

    log_path = out / "train_log.jsonl"
    log_writer = JsonlWriter(log_path) if is_main_process() else None

    class LogToFile(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs is None:
                return
            entry = {"step": state.global_step, "epoch": state.epoch, **logs}
            if log_writer:
                log_writer.write(entry)
            if on_log:
                on_log(entry)

    def length(r: dict) -> int:
        return len(r["prompt"]) + len(r["text"])  # characters: cheap, only orders batches

    from datasets import Dataset
    train_ds = Dataset.from_list([{**r, "length": length(r)} for r in split.train])
    eval_ds = Dataset.from_list([{**r, "length": length(r)} for r in split.eval]) \
        if split.eval else None
    callbacks = [LogToFile()]
    if not cfg.lora_r:  # LoRA trains the rows as their own parameters at the adapter's lr
        callbacks.append(ControlTokenLrScale(model, vocab.control_ids,
                                             cfg.control_token_lr_scale))
    loss_func = None
    if cfg.control_token_loss_weight != 1.0:
        from solm.train.losses import weighted_token_loss
        loss_func = weighted_token_loss(model, vocab.control_ids, cfg.control_token_loss_weight)
    trainer = Trainer(model=model, args=args, data_collator=collator, train_dataset=train_ds,
                      eval_dataset=eval_ds, processing_class=tok, callbacks=callbacks,
                      compute_loss_func=loss_func)
    if cfg.quiet:  # the Trainer prints each log dict when its progress bar is off
        from transformers.trainer_callback import PrinterCallback
        trainer.remove_callback(PrinterCallback)
    started = time.time()
    eval_before = None
    if eval_ds is not None and resume is None:
        eval_before = trainer.evaluate()["eval_loss"]
    result = trainer.train(resume_from_checkpoint=resume)
    eval_after = None
    if eval_ds is not None:
        last = [e for e in trainer.state.log_history
                if "eval_loss" in e and e.get("step") == trainer.state.global_step]
        eval_after = last[-1]["eval_loss"] if last else trainer.evaluate()["eval_loss"]
    wall = time.time() - started
    if log_writer:
        log_writer.close()
    if not trainer.is_world_process_zero():
        return {}

    fmt = "full"
    final = trainer.model
    if cfg.lora_r:
        if cfg.merge:
            final = final.merge_and_unload()
            fmt = "lora-merged"
        else:
            fmt = "lora-adapter"
    final.config.use_cache = True
    final.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    meta = {
        "complete": True,
        "system": cfg.system,
        "control_tokens": "pasta",
        "format": fmt,
        "parent_model": cfg.model,
        "parent_path": resolve_model_path(cfg.model),
        "data": {"path": str(cfg.data), "sha256": file_sha256(cfg.data), "rows": len(rows),
                 "skipped_too_long": too_long,
                 "train_rows": len(split.train), "eval_rows": len(split.eval),
                 "tagged_train_rows": split.annotated},
        "settings": {k: v for k, v in asdict(cfg).items() if k not in ("quiet", "extra")},
        "effective": {"gradient_accumulation_steps": accum, "world_size": world_size(),
                      "bf16": bf16, "gradient_checkpointing": grad_ckpt,
                      "device": str(trainer.args.device)},
        "results": {"global_steps": result.global_step, "train_loss": result.training_loss,
                    "eval_loss_before": eval_before, "eval_loss_after": eval_after,
                    "wall_s": round(wall, 1), "resumed_from": resume},
        "versions": package_versions(),
        **cfg.extra,
    }
    write_metadata(out, meta)
    from solm.train.plots import plot_losses
    weight = cfg.control_token_loss_weight
    plot_losses(log_path, out / "loss.png", train_label="train loss" if weight == 1.0 else
                f"train loss (control tokens x{weight:g})")
    return meta

