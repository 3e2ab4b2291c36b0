"""What every solm trainer shares, on transformers' Trainer.

A trainer is a config dataclass (settings written once, with their help: `TrainConfig` and a
subclass per stage) beside a `SolmTrainer` subclass that says what is stage-specific: the rows
(`read_data`, `prepare_data`), the batches (`data_collator`), optionally the loss (`compute_loss_func`) and
the Trainer class. The base does the rest, the same way for every stage:

- the parent model with the system's control tokens, full finetuning or LoRA (the new
  control-token rows always train; in full finetuning at `control_token_lr_scale` x lr);
- `TrainingArguments` from the config: global batch by gradient accumulation over every
  process (one code path for a CPU, `accelerate launch` and `torchrun`), precision,
  activation checkpointing, evaluation and checkpoint cadence;
- resumable: checkpoints in OUT/checkpoints, a rerun resumes from the last one;
- OUT ends as a plain `save_pretrained` folder with the tokenizer, `solm.json` (written last:
  system, parent, data, settings, results, versions), `train_log.jsonl` and `loss.png`.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from solm.core.errors import SolmError
from solm.core.models import DEFAULT_MODEL
from solm.core.settings import setting
from solm.train.checkpoint import (METADATA_FILE, read_metadata, resumed_schedule,
                                   write_metadata)


@dataclass(kw_only=True)
class TrainConfig:
    """Settings every trainer has; a stage's config adds its own."""

    out: str = setting(help="Output folder (checkpoints inside).", flags=("--out", "-o"))
    model: str = setting(DEFAULT_MODEL, "Parent model: alias, HF folder, hub id or .gguf file.",
                         flags=("--model", "-m"))
    learning_rate: float = setting(1e-5, "Peak learning rate (linear decay to 0).",
                                   flags=("--lr",), cli_name="lr", above=0)
    epochs: float = setting(4.0, "Passes over the training rows.", above=0)
    max_steps: int = setting(-1, "Stop after N optimizer steps (overrides epochs; -1: off).",
                             min=-1)
    batch_size: int = setting(8, "Global batch (all devices x accumulation).", min=1)
    micro_batch_size: int = setting(1, "Rows per device per forward pass.", min=1)
    eval_rows: int = setting(32, "Held-out rows for the eval loss (seeded split).", min=0)
    eval_every: Optional[int] = setting(None, "Eval every N steps (default: each epoch).",
                                        min=1)
    save_every: int = setting(50, "Steps between resumable checkpoints.", min=1)
    lora_r: int = setting(0, "LoRA rank on all linear layers (0 = full finetuning); "
                             "control-token embeddings train too.", min=0)
    lora_alpha: Optional[int] = setting(None, "LoRA alpha (default 2 x rank).", min=1)
    lora_dropout: float = setting(0.0, "LoRA dropout.", min=0, max=1)
    merge: bool = setting(False, "LoRA: save merged full weights, not the adapter.")
    gradient_checkpointing: Optional[bool] = setting(
        None, "Recompute activations in backward (default: on for GPU, off on CPU).",
        flags=("--gradient-checkpointing/--no-gradient-checkpointing",))
    attention: str = setting("auto", "Attention in training: flex (FlexAttention block masks "
                             "built from the structure's terms: masked-out blocks are skipped), "
                             "sdpa (dense mask), auto (flex on CUDA, sdpa on a CPU, where it "
                             "measured faster).", choices=("auto", "sdpa", "flex"))
    precision: str = setting("auto", "auto (bf16 mixed precision where the hardware has it, "
                                     "else fp32), bf16, fp32.",
                             choices=("auto", "bf16", "fp32"))
    warmup_ratio: float = setting(0.0, "Fraction of steps warming up the lr.", min=0, max=1)
    control_token_lr_scale: float = setting(
        10.0, "Full finetuning: the control tokens' embedding rows learn this many times "
              "faster (they start far from any useful value).", above=0)
    weight_decay: float = setting(0.0, "AdamW weight decay.", min=0)
    seed: int = setting(0, "Seed of the data order, the held-out split and LoRA's init.")
    limit: Optional[int] = setting(None, "Only the first N rows of the data.", min=1)
    logging_steps: int = setting(5, "Optimizer steps between log lines (train_log.jsonl).",
                                 min=1)
    quiet: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # more keys for solm.json


@dataclass
class PreparedData:
    """A stage's rows, split, and what solm.json records about them."""

    train: list[dict]
    eval: list[dict]
    meta: dict[str, Any]


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


# seconds a process waits for its process group to close once every process has passed the
# final barrier; gloo's teardown now and then never returns (pytorch/pytorch#75097)
SHUTDOWN_GRACE_S = 60.0


def end_process_group() -> None:
    """Wait for every process, then close the process group. A process that leaves with the
    group open can abort at exit (gloo's threads: "terminate called without an active
    exception"), failing a launch whose training succeeded. Everything is saved before this
    runs, so a teardown that has not returned after `SHUTDOWN_GRACE_S` ends the process with
    success rather than hang the launch."""
    import sys
    import threading

    import torch.distributed as dist

    from solm.core.notices import notice

    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    closed = threading.Event()

    def close() -> None:
        dist.destroy_process_group()
        closed.set()

    threading.Thread(target=close, daemon=True).start()
    if not closed.wait(SHUTDOWN_GRACE_S):
        notice(f"the process group did not close within {SHUTDOWN_GRACE_S:.0f} s of the last "
               "barrier; training is saved, exiting")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def accumulation_steps(cfg: TrainConfig) -> int:
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


def without_tied_copies(state_dict: dict, model) -> dict:
    """A gathered state dict holds tied weights as separate copies, which save_pretrained
    (it finds ties by shared storage) would write twice: keep only each tie's source."""
    ties = getattr(model, "all_tied_weights_keys", None) or {}
    drop = {target for target, source in ties.items()
            if target in state_dict and source in state_dict
            and torch.equal(state_dict[target], state_dict[source])}
    return {k: v for k, v in state_dict.items() if k not in drop}


class SolmTrainer:
    """Subclasses set `control_tokens` (a registered system) and implement the hooks; a
    trainer that can also train the plain baseline names the config setting that strips the
    tags (`strip_setting`) and what solm.json then calls the model (`plain_system`)."""

    control_tokens = "pasta"
    strip_setting = ""
    plain_system = ""

    def __init__(self, config: TrainConfig, on_log: Callable[[dict], None] | None = None):
        self.config = config
        self.on_log = on_log
        self.notices: list[str] = []  # warnings found by `check`, printed by the command

    # ---- hooks ------------------------------------------------------------------------

    @property
    def system(self) -> str:
        """What solm.json calls the trained model."""
        if self.strip_setting and getattr(self.config, self.strip_setting):
            return self.plain_system
        return self.control_tokens

    def read_data(self) -> Any:
        """Read and validate the input rows; runs before the model loads, so bad data fails
        fast (file:line:field errors)."""
        raise NotImplementedError

    def prepare_data(self, raw: Any, tokenizer, vocab) -> PreparedData:
        """Filter and split what `read_data` returned, now that the tokenizer is there."""
        raise NotImplementedError

    def data_collator(self, tokenizer, vocab) -> Callable:
        raise NotImplementedError

    def before_training(self, model, tokenizer, vocab, data: PreparedData, args) -> None:
        """Runs once the model is loaded and the rows prepared, before the Trainer exists
        (and before a resumed run loads its checkpoint): the model is still the parent."""

    def compute_loss_func(self, model, vocab) -> Callable | None:
        """A Trainer `compute_loss_func`, or None for the model's own loss."""
        return None

    def loss_label(self) -> str:
        return "train loss"

    def write_plots(self, log_path: Path, out: Path) -> None:
        """The run's plots beside its weights, from its train_log.jsonl."""
        from solm.train.plots import plot_losses

        plot_losses(log_path, out / "loss.png", train_label=self.loss_label())

    def control_token_options(self) -> dict[str, Any]:
        """Options of the system's control tokens (TIP: `num_registers`); they reach the
        tokenizer, the vocab and solm.json, which loading reads back."""
        return {}

    def vocab_options(self) -> dict[str, Any]:
        """Options of the system's vocab that are no tokens (PASTA: the `positions` layout);
        they reach the vocab and solm.json, which loading reads back."""
        return {}

    def prompt_instruction(self, tokenizer) -> str | None:
        """The instruction every training prompt ended with (solm.json's
        `prompt_instruction`, which every decode gives the trained model): the parent's."""
        from solm.core.prompt_format import tokenizer_instruction

        return tokenizer_instruction(tokenizer)

    def extra_results(self, trainer) -> dict[str, Any]:
        """Results of this stage beyond the losses every stage reports (solm.json)."""
        return {}

    def trainer_class(self) -> type:
        from transformers import Trainer
        return Trainer

    def attention(self) -> str:
        """`sdpa` or `flex` for this run (`--attention auto` resolved for the device)."""
        from solm.train.flex import resolve_attention
        return resolve_attention(self.config.attention,
                                 "cuda" if torch.cuda.is_available() else "cpu")

    # ---- shared -----------------------------------------------------------------------

    def input_paths(self) -> list[str]:
        """Files this stage reads (checked against the folder it writes)."""
        return [p for p in (getattr(self.config, "data", None),) if p]

    def check(self) -> None:
        cfg = self.config
        out = Path(cfg.out)
        for source in self.input_paths():
            src = Path(source)
            inside = src.exists() and out.exists() and out.resolve() in src.resolve().parents
            if (src.exists() and src.resolve() == out.resolve()) or inside:
                raise SolmError(f"{source}: the input lies in the output folder {cfg.out}, "
                                f"which training writes into; choose another --out")
        if out.exists() and not out.is_dir():
            raise SolmError(f"{cfg.out}: --out is a file; training writes a folder there")
        from solm.core.paths import refuse_unwritable
        refuse_unwritable([out / METADATA_FILE])
        if read_metadata(cfg.out) is not None and read_metadata(cfg.out).get("complete"):
            raise SolmError(f"{cfg.out} already holds a finished model ({METADATA_FILE}); "
                            f"choose another --out or delete it")
        if cfg.lora_r < 0:
            raise SolmError("--lora-r must be >= 0")
        if cfg.merge and not cfg.lora_r:
            raise SolmError("--merge applies to LoRA only (set --lora-r)")
        if cfg.merge and os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
            raise SolmError("--merge under FSDP: the adapter's base weights are sharded across "
                            "processes; train without --merge and merge the saved adapter in "
                            "one process")

    def load_model(self):
        """(model, tokenizer, vocab): the parent with the control tokens, LoRA-wrapped if
        asked; fp32 weights on the CPU (the Trainer moves them)."""
        from solm.core.vocabulary import add_control_tokens
        from solm.core.models import load_model
        from solm.core.systems import get_system

        cfg = self.config
        impl = "flex_attention" if self.attention() == "flex" else "sdpa"
        model, tok = load_model(cfg.model, dtype="fp32", device="cpu", attn_implementation=impl)
        if impl == "flex_attention":
            from solm.train.flex import refuse_dense_masks
            refuse_dense_masks(model)
        options = self.control_token_options()
        add_control_tokens(model, tok, self.control_tokens, **options)
        vocab = get_system(self.control_tokens).structure_module().Vocab.from_tokenizer(
            tok, **options, **self.vocab_options())
        model.config.use_cache = False
        if cfg.lora_r:
            from peft import LoraConfig, get_peft_model
            from transformers import set_seed
            set_seed(cfg.seed)  # adapter init is random: same seed, same run
            # the new control-token rows train too: they start as the mean embedding, which
            # no adapter can turn into a useful tag
            lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha or 2 * cfg.lora_r,
                              lora_dropout=cfg.lora_dropout, target_modules="all-linear",
                              task_type="CAUSAL_LM", trainable_token_indices=vocab.control_ids)
            model = get_peft_model(model, lora)
        return model, tok, vocab

    def arguments_class(self) -> type:
        """The Trainer's arguments class (a stage on TRL returns its config class)."""
        from transformers import TrainingArguments
        return TrainingArguments

    def extra_arguments(self) -> dict[str, Any]:
        """Arguments of `arguments_class` beyond those every stage sets."""
        return {}

    def build_trainer(self, trainer_cls: type, **kwargs):
        """The Trainer itself; a stage whose Trainer takes other arguments overrides this."""
        return trainer_cls(**kwargs)

    def training_arguments(self, data: PreparedData, ckpt_dir: Path, accum: int, bf16: bool,
                           grad_ckpt: bool):
        cfg = self.config
        steps_per_epoch = max(1, math.ceil(len(data.train) / cfg.batch_size))
        return self.arguments_class()(
            output_dir=str(ckpt_dir), learning_rate=cfg.learning_rate,
            lr_scheduler_type="linear", warmup_steps=cfg.warmup_ratio,
            weight_decay=cfg.weight_decay, num_train_epochs=cfg.epochs,
            max_steps=cfg.max_steps, per_device_train_batch_size=cfg.micro_batch_size,
            per_device_eval_batch_size=cfg.micro_batch_size, gradient_accumulation_steps=accum,
            eval_strategy="steps" if data.eval else "no",
            eval_steps=cfg.eval_every or steps_per_epoch,
            save_strategy="steps", save_steps=cfg.save_every, save_total_limit=2,
            logging_steps=cfg.logging_steps, logging_first_step=True,
            bf16=bf16, use_cpu=not torch.cuda.is_available(),
            activation_checkpointing=grad_ckpt,
            activation_checkpointing_kwargs={"use_reentrant": False} if grad_ckpt else None,
            remove_unused_columns=False, report_to="none", seed=cfg.seed, data_seed=cfg.seed,
            train_sampling_strategy="group_by_length" if cfg.micro_batch_size > 1 else "random",
            disable_tqdm=cfg.quiet, dataloader_num_workers=0, **self.extra_arguments(),
        )

    def train(self) -> dict:
        """Train, save the final model into `out` and return its metadata ({} on processes
        other than the main one)."""
        from transformers.trainer_utils import get_last_checkpoint

        cfg = self.config
        out = Path(cfg.out)
        self.check()
        raw = self.read_data()
        accum = accumulation_steps(cfg)
        bf16 = use_bf16(cfg.precision)
        grad_ckpt = (torch.cuda.is_available() if cfg.gradient_checkpointing is None
                     else cfg.gradient_checkpointing)
        model, tok, vocab = self.load_model()
        data = self.prepare_data(raw, tok, vocab)

        ckpt_dir = out / "checkpoints"
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        resume = get_last_checkpoint(str(ckpt_dir))
        steps_before = (resumed_schedule(resume, cfg.max_steps, cfg.epochs)
                        if resume is not None else 0)
        args = self.training_arguments(data, ckpt_dir, accum, bf16, grad_ckpt)
        self.before_training(model, tok, vocab, data, args)
        log_path = out / "train_log.jsonl"
        trainer = self._trainer(model, tok, vocab, data, args, log_path)
        started = time.time()
        eval_before = None
        if data.eval and resume is None:
            eval_before = trainer.evaluate()["eval_loss"]
        result = trainer.train(resume_from_checkpoint=resume)
        eval_after = None
        if data.eval:
            last = [e for e in trainer.state.log_history
                    if "eval_loss" in e and e.get("step") == trainer.state.global_step]
            eval_after = last[-1]["eval_loss"] if last else trainer.evaluate()["eval_loss"]
        wall = time.time() - started
        self._close_log()
        # under FSDP every process takes part in gathering the full weights; only the main
        # one writes them (a rank-0-only save_pretrained would hang or write a shard)
        state_dict = (trainer.accelerator.get_state_dict(trainer.model)
                      if getattr(trainer, "is_fsdp_enabled", False) else None)
        meta: dict = {}
        if trainer.is_world_process_zero():
            fmt = self._save(trainer.model, tok, out, state_dict)
            meta = self._metadata(data, fmt, accum, bf16, grad_ckpt, trainer, result, resume,
                                  eval_before, eval_after, wall)
            meta["results"]["steps_this_run"] = result.global_step - steps_before
            meta["prompt_instruction"] = self.prompt_instruction(tok)
            write_metadata(out, meta)
            self.write_plots(log_path, out)
        end_process_group()
        return meta

    # ---- pieces of train() ------------------------------------------------------------

    def _trainer(self, model, tok, vocab, data: PreparedData, args, log_path: Path):
        from datasets import Dataset
        from transformers import TrainerCallback

        from solm.core.jsonl import JsonlWriter
        from solm.train.callbacks import ControlTokenLrScale

        cfg = self.config
        self._log_writer = JsonlWriter(log_path) if is_main_process() else None
        writer, on_log = self._log_writer, self.on_log

        class LogToFile(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kw):
                if logs is None:
                    return
                entry = {"step": state.global_step, "epoch": state.epoch, **logs}
                if writer:
                    writer.write(entry)
                if on_log:
                    on_log(entry)

        def length(r: dict) -> int:  # characters: cheap, only orders batches
            return len(r["prompt"]) + len(r.get("text", ""))

        train_ds = Dataset.from_list([{**r, "length": length(r)} for r in data.train])
        eval_ds = (Dataset.from_list([{**r, "length": length(r)} for r in data.eval])
                   if data.eval else None)
        callbacks = [LogToFile()]
        if not cfg.lora_r:  # LoRA trains the rows as their own parameters at the adapter's lr
            callbacks.append(ControlTokenLrScale(model, vocab.control_ids,
                                                 cfg.control_token_lr_scale))
        trainer_cls, collator = self.trainer_class(), self.data_collator(tok, vocab)
        if hasattr(collator, "epoch"):
            from solm.train.callbacks import EpochToCollator
            callbacks.append(EpochToCollator(collator))
        if getattr(collator, "flex", False):
            from solm.train.flex import flex_trainer
            trainer_cls = flex_trainer(trainer_cls, collator.term)
        trainer = self.build_trainer(
            trainer_cls, model=model, args=args, data_collator=collator,
            train_dataset=train_ds, eval_dataset=eval_ds, processing_class=tok,
            callbacks=callbacks, compute_loss_func=self.compute_loss_func(model, vocab))
        if cfg.quiet:  # the Trainer prints each log dict when its progress bar is off
            from transformers.trainer_callback import PrinterCallback
            trainer.remove_callback(PrinterCallback)
        return trainer

    def _close_log(self) -> None:
        if self._log_writer:
            self._log_writer.close()

    def _save(self, final, tok, out: Path, state_dict: dict | None = None) -> str:
        fmt = "full"
        if self.config.lora_r:
            if self.config.merge:
                final = final.merge_and_unload()
                fmt = "lora-merged"
            else:
                fmt = "lora-adapter"
        final.config.use_cache = True
        extra = {}
        if fmt == "lora-adapter":
            # the control tokens' rows are saved as their trained deltas; the rest of the
            # (resized) embedding is the parent's, rebuilt on load: without this peft writes
            # both whole embedding matrices (226 MB for the embedded model)
            extra["save_embedding_layers"] = False
        if state_dict is not None:  # gathered from the FSDP shards
            extra["state_dict"] = without_tied_copies(state_dict, final)
        final.save_pretrained(str(out), safe_serialization=True, **extra)
        tok.save_pretrained(str(out))
        self._inherit_generation_config(out)
        return fmt

    def _inherit_generation_config(self, out: Path) -> None:
        """The parent's decoding defaults travel to the child (the kept CPU models need their
        repetition penalty): its generation_config.json is copied over whatever
        save_pretrained wrote."""
        import shutil

        from solm.core.generation import GENERATION_CONFIG
        from solm.core.models import ALIASES, artifact_folder

        parent = self.config.model
        if parent in ALIASES and not artifact_folder(parent):
            return
        source = Path(artifact_folder(parent) or parent) / GENERATION_CONFIG
        if source.is_file():
            shutil.copyfile(source, out / GENERATION_CONFIG)

    def _metadata(self, data: PreparedData, fmt: str, accum: int, bf16: bool, grad_ckpt: bool,
                  trainer, result, resume, eval_before, eval_after, wall: float) -> dict:
        from solm.core.models import resolve_model_path
        from solm.core.provenance import package_versions

        cfg = self.config
        return {
            "complete": True,
            "system": self.system,
            "control_tokens": self.control_tokens,
            "format": fmt,
            "parent_model": cfg.model,
            "parent_path": resolve_model_path(cfg.model),
            "data": data.meta,
            "settings": {k: v for k, v in asdict(cfg).items() if k not in ("quiet", "extra")},
            "effective": {"gradient_accumulation_steps": accum, "world_size": world_size(),
                          "bf16": bf16, "gradient_checkpointing": grad_ckpt,
                          "device": str(trainer.args.device)},
            "results": {"global_steps": result.global_step, "train_loss": result.training_loss,
                        "eval_loss_before": eval_before, "eval_loss_after": eval_after,
                        "wall_s": round(wall, 1), "resumed_from": resume,
                        **self.extra_results(trainer)},
            "versions": package_versions(),
            **self.control_token_options(),
            **self.vocab_options(),
            **cfg.extra,
        }
