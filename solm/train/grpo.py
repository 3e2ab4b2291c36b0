"""TIP-GRPO: group-relative policy optimisation of a TIP model's eviction decisions, with
reward = correctness − c × live KV.

Which trainer, and why: TRL's `GRPOTrainer` (clipped surrogate, KL to a reference, the loss
types, reward scaling and logging are its own), with two of its override points:

- `rollout_func`: rollouts come from `TipRuntime`, so eviction really happens while the
  policy samples: a reused register frees the older step's pages, requests are batched over
  one paged pool and refilled as they end. TRL hands it the prompts already repeated once per
  generation (`tests/test_tip_grpo.py` pins that), and it returns one completion per prompt,
  with each sampled token's log-prob at the sampling temperature.
- `_get_per_token_logps_and_entropies`: TRL passes left-padded prompt + right-padded
  completion ids with a 2-D mask; the override rebuilds each row's TIP structure from its real
  tokens (`solm.core.systems.tip.structure`, the single source of masks) and scores the
  completion under it, so training sees exactly the visibility the runtime sampled under
  (tested equal to the runtime's record, fp32, < 1e-4).

The stage sits on `SolmTrainer` for everything else (model and LoRA with the register tokens,
bf16, resume from OUT/checkpoints, solm.json, train_log.jsonl, loss plot).

**Reward.** `correct − c · kv`: `correct` is 1 when the last `\\boxed{}` answer (GSM8K's
`#### N` too) matches the gold (`solm.core.math_task`: integer match for GSM8K / AIME,
math-verify otherwise), else 0; `kv` is the rollout's live response KV, the mean number of
response tokens attention read per decode step, divided by `--max-completion-length`, so it
lies in [0, 1] and rises with live KV. Logged per step: `correct`, `kv`, and the share of
groups whose correctness varies (`groups_varying`): where no group varies, every advantage
comes from the KV term alone and the model only learns to be short.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from solm.core.errors import SolmError
from solm.core.settings import setting
from solm.train.base import PreparedData, SolmTrainer, TrainConfig

LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo")


@dataclass(kw_only=True)
class TipGRPOConfig(TrainConfig):
    """Settings of `tip grpo`."""

    data: str = setting(help="JSONL of problems: `question` / `problem` / `prompt`, and the "
                             "gold `final_answer` / `answer` (GSM8K's `#### N` works).",
                        flags=("--data", "-d"))
    registers: int = setting(16, "Thought registers of the model (its solm.json's, when it "
                                 "has one, must agree).", min=1)
    learning_rate: float = setting(1e-6, "Peak learning rate (linear decay to 0).",
                                   flags=("--lr",), cli_name="lr", above=0)
    epochs: float = setting(1.0, "Passes over the problems.", above=0)
    batch_size: int = setting(16, "Completions per optimizer step (prompts per step x "
                                  "--num-generations).", min=1)
    num_generations: int = setting(8, "Completions per prompt (the group).", min=2)
    max_completion_length: int = setting(512, "Cap on each completion's tokens.", min=1)
    temperature: float = setting(1.0, "Sampling temperature of the rollouts.", above=0)
    top_p: float = setting(1.0, "Nucleus mass of the rollouts.", above=0, max=1)
    kv_penalty: float = setting(0.1, "c in reward = correct - c x live KV / "
                                     "max-completion-length.", min=0)
    beta: float = setting(0.0, "KL coefficient against the starting model (0: no "
                               "reference model is kept).", min=0)
    epsilon: float = setting(0.2, "Clipping range of the importance ratio.", above=0)
    epsilon_high: Optional[float] = setting(None, "Upper clipping range (default: "
                                                  "epsilon).", above=0)
    loss_type: str = setting("dapo", "TRL's loss aggregation.", choices=LOSS_TYPES)
    scale_rewards: str = setting("group", "Divide advantages by the reward's std: group, "
                                          "batch or none.", choices=("group", "batch", "none"))
    num_iterations: int = setting(1, "Optimisation passes per batch of rollouts.", min=1)
    policy: str = setting("tip", "Eviction policy of the rollouts (tip: registers free "
                                 "pages; dense: nothing is evicted).", choices=("tip", "dense"))
    page_size: int = setting(16, "Tokens per KV page of the rollout runtime.", min=1)
    rollout_batch: int = setting(16, "Rollouts decoded together (refilled as they end).",
                                 min=1)
    math_prompt: bool = setting(True, "Append the maths instruction to each problem, as tip "
                                      "sft / tip eval do.")
    eval_rows: int = setting(0, "Held-out problems (GRPO logs no eval loss; kept at 0).",
                             min=0, max=0)


# ---- rewards --------------------------------------------------------------------------


def kv_term(live_response_tokens: float, max_completion_length: int) -> float:
    """The rollout's live response KV on [0, 1]: monotone in live KV."""
    return min(1.0, max(0.0, live_response_tokens / max_completion_length))


def group_varies(correct: list[float], group: int) -> list[bool]:
    """Per consecutive group of `group` completions: does correctness differ inside it?"""
    return [len(set(correct[i:i + group])) > 1 for i in range(0, len(correct), group)]


class TipReward:
    """TRL reward function: correct − c · kv, logging its parts into the trainer's metrics."""

    __name__ = "tip_reward"

    def __init__(self, kv_penalty: float, max_completion_length: int, num_generations: int):
        self.kv_penalty = kv_penalty
        self.max_len = max_completion_length
        self.group = num_generations
        self.trainer = None  # set once the trainer exists: metrics go to its log

    def __call__(self, prompts, completions, gold, kind, live_response_kv, **kwargs
                 ) -> list[float]:
        from solm.core.math_task import is_correct, predicted_answer

        correct = [float(is_correct(predicted_answer(c), g, k))
                   for c, g, k in zip(completions, gold, kind)]
        kv = [kv_term(x, self.max_len) for x in live_response_kv]
        if self.trainer is not None:
            metrics = self.trainer._metrics["train"]
            varies = group_varies(correct, self.group)
            metrics["correct"].append(sum(correct) / len(correct))
            metrics["kv"].append(sum(kv) / len(kv))
            metrics["groups_varying"].append(sum(varies) / max(1, len(varies)))
        return [c - self.kv_penalty * k for c, k in zip(correct, kv)]


# ---- rollouts -------------------------------------------------------------------------


@contextlib.contextmanager
def root_unsharded(model):
    """Under FSDP2, the root's own parameters (embeddings, final norm, head) gathered while
    the block runs: the runtimes call the decoder stack and the head directly, never the
    root's forward whose hook would gather them (each layer still gathers its own)."""
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        yield
        return
    model.unshard()
    try:
        yield
    finally:
        model.reshard()


def inner_model(model):
    """The causal LM the runtime drives: a PEFT wrapper's model, LoRA layers inside."""
    from peft import PeftModel

    return model.base_model.model if isinstance(model, PeftModel) else model


class TipRollouts:
    """`rollout_func(prompts, trainer)`: one sampled completion per prompt it gets, decoded
    by `TipRuntime` under the eviction policy, with each token's log-prob."""

    def __init__(self, tokenizer, registers: int, policy: str, page_size: int,
                 batch_size: int, max_completion_length: int, temperature: float,
                 top_p: float, seed: int = 0):
        self.tokenizer, self.registers, self.policy = tokenizer, registers, policy
        self.page_size, self.batch_size = page_size, batch_size
        self.max_len, self.temperature, self.top_p = max_completion_length, temperature, top_p
        self.seed = seed
        self.calls = 0
        self._draws: dict[int, int] = {}  # optimizer step -> rollout calls made at it
        self.prompts_seen: list[list[str]] = []  # what TRL handed over, per call
        self._runtime = None
        self._pool_pages = 0

    def runtime(self, model, prompts: list[list[int]]):
        from solm.decode.tip.policies import POLICIES
        from solm.decode.tip.runtime import TipRuntime, worst_case_pages

        per_request = worst_case_pages(max(len(p) for p in prompts), self.max_len,
                                       self.page_size, self.registers,
                                       POLICIES[self.policy].fresh_page_per_step)
        pages = per_request * min(self.batch_size, len(prompts))
        if self._runtime is None or self._runtime.model is not model or pages > self._pool_pages:
            self._runtime = TipRuntime(model, self.tokenizer, num_pages=pages,
                                       page_size=self.page_size, num_registers=self.registers)
            self._pool_pages = pages
        return self._runtime

    def draw_seed(self, trainer) -> int:
        """The sampling seed of this call: from the optimizer step it is made at (and the
        calls already made at that step), so a run resumed from a checkpoint samples what the
        unbroken run did; a counter of calls would restart at 0."""
        state = getattr(trainer, "state", None)
        step = getattr(state, "global_step", None)
        if step is None:  # no trainer state (called on its own): one draw per call
            step = self.calls
        n = self._draws.get(step, 0)
        self._draws[step] = n + 1
        return self.seed + 100_003 * step + 7_919 * n

    def __call__(self, prompts: list[str], trainer) -> dict[str, Any]:
        from solm.core.chat import prompt_ids
        from solm.core.sampling import SamplingConfig
        from solm.decode.tip.runtime import TipDecodeConfig, TipRequest

        self.prompts_seen.append(list(prompts))
        model = inner_model(trainer.accelerator.unwrap_model(trainer.model))
        ids = [prompt_ids(self.tokenizer, p) for p in prompts]
        # seeded by each prompt's place in the global generation batch: TRL hands process k
        # the k-th contiguous slice, so N processes sample what one process would
        offset = getattr(trainer.accelerator, "process_index", 0) * len(prompts)
        reqs = [TipRequest(i, p, seed=offset + i) for i, p in enumerate(ids)]
        cfg = TipDecodeConfig(
            policy=self.policy, batch_size=self.batch_size, max_new_tokens=self.max_len,
            sampling=SamplingConfig(temperature=self.temperature, top_p=self.top_p,
                                    seed=self.draw_seed(trainer)),
            record_logprobs=True)
        self.calls += 1
        was_training = model.training
        model.eval()
        try:
            # in the trainer's precision (bf16 autocast under --precision bf16), so the
            # sampler's log-probs are the ones the trainer recomputes
            with trainer.accelerator.autocast(), root_unsharded(trainer.model):
                results = {r.rid: r for r in self.runtime(model, ids).run(reqs, cfg)}
        finally:
            model.train(was_training)
        out = [results[i] for i in range(len(reqs))]
        return {
            "prompt_ids": ids,
            "completion_ids": [r.ids for r in out],
            "logprobs": [r.logprobs for r in out],
            # the response's own tokens attention read (the runtime counts them: a policy
            # that evicts the prompt would make "live minus prompt" meaningless)
            "live_response_kv": [r.mean_live_response_tokens for r in out],
            "evicted_pages": [r.evicted_pages for r in out],
        }


# ---- log-probs under TIP's structure -----------------------------------------------------


def structured_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_cols: int,
                      vocab, tip: bool, length: int | None = None
                      ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """(attributes [B, L], real columns [B, L], positions [B, L]) for TRL's left-padded prompt
    + right-padded completion: each row's real tokens under TIP's structure (prompt = the real
    tokens of the first `prompt_cols` columns), laid back into their columns; `length` (at
    least T) adds padding columns at the end. The mask follows from these by one rule
    (`solm.train.flex.structure_mask`): a padding column sees only itself."""
    from solm.core.systems.tip import structure

    b, t = input_ids.shape
    length = length or t
    attrs: dict[str, torch.Tensor] = {}
    real_cols = torch.zeros((b, length), dtype=torch.bool)
    positions = torch.zeros((b, length), dtype=torch.long)
    for i in range(b):
        real = attention_mask[i].bool().cpu()
        cols = real.nonzero().flatten()
        ids = input_ids[i, cols.to(input_ids.device)].tolist()
        n_prompt = int(real[:prompt_cols].sum())
        n = len(ids)
        row = (structure(ids, vocab, prompt_len=n_prompt).attrs if tip
               else {"index": torch.arange(n)})
        for name, values in row.items():
            attrs.setdefault(name, torch.zeros((b, length), dtype=torch.long))[i, cols] = values
        real_cols[i, cols] = True
        positions[i, cols] = torch.arange(n)
    return attrs, real_cols, positions


def completion_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        logits_to_keep: int, vocab, temperature: float, tip: bool = True,
                        compute_entropy: bool = False
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs [B, K] (at `temperature`) of the last K columns, under TIP's masks
    (a BlockMask for a FlexAttention model, its length padded to whole blocks)."""
    from solm.core.systems.tip import causal, tip_visible
    from solm.train.flex import compile_settings_for, is_flex, padded_length, structure_mask

    b, t = input_ids.shape
    prompt_cols = t - logits_to_keep
    length = padded_length(t) if is_flex(model) else t
    attrs, real, positions = structured_inputs(input_ids, attention_mask, prompt_cols, vocab,
                                               tip, length)
    device = input_ids.device
    mask = structure_mask(model, tip_visible if tip else causal, attrs, real, device)
    ids = input_ids
    if length > t:
        ids = torch.cat([input_ids, input_ids.new_zeros((b, length - t))], dim=1)
    with compile_settings_for(model):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions.to(device),
                       use_cache=False).logits[:, :t]
    logits = logits[:, prompt_cols - 1:-1].float() / temperature
    logps_all = torch.log_softmax(logits, dim=-1)
    targets = input_ids[:, prompt_cols:]
    logps = logps_all.gather(-1, targets[..., None]).squeeze(-1)
    entropy = None
    if compute_entropy:
        entropy = -(logps_all.exp() * logps_all).sum(-1)
    return logps, entropy


def tip_grpo_trainer_class(vocab, tip: bool) -> type:
    from trl import GRPOTrainer

    class TipGRPOTrainerTRL(GRPOTrainer):
        """GRPOTrainer scoring completions under TIP's structure."""

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask,
                                               logits_to_keep, batch_size=None,
                                               compute_entropy=False, compute_aux_loss=False,
                                               **kwargs):
            batch_size = batch_size or input_ids.size(0)
            logps, entropies = [], []
            for start in range(0, input_ids.size(0), batch_size):
                end = start + batch_size
                with self.accelerator.autocast():
                    lp, ent = completion_logprobs(model, input_ids[start:end],
                                                  attention_mask[start:end], logits_to_keep,
                                                  vocab, self.temperature, tip,
                                                  compute_entropy)
                logps.append(lp)
                if ent is not None:
                    entropies.append(ent)
            return (torch.cat(logps), torch.cat(entropies) if entropies else None, None)

        def _get_train_sampler(self, dataset=None):
            return epoch_seeded(super()._get_train_sampler(dataset))

    return TipGRPOTrainerTRL


def epoch_seeded(sampler):
    """TRL's RepeatSampler draws each epoch's order from one generator seeded once, so a run
    resumed in epoch e replays epoch 0's order. With `set_epoch` (the Trainer calls it on
    every epoch, the resumed one included) each epoch's order comes from seed + epoch."""
    if not getattr(sampler, "shuffle", False):
        return sampler
    base = sampler.seed if sampler.seed is not None else 0

    def set_epoch(epoch: int) -> None:
        sampler.generator.manual_seed(base + epoch)

    sampler.set_epoch = set_epoch
    return sampler


class TipGRPOTrainer(SolmTrainer):
    control_tokens = "tip"
    config: TipGRPOConfig

    @property
    def system(self) -> str:
        return "tip" if self.config.policy == "tip" else "dense"

    def prompt_instruction(self, tokenizer) -> str | None:
        from solm.core.math_task import INSTRUCTION

        return INSTRUCTION if self.config.math_prompt else super().prompt_instruction(tokenizer)

    def control_token_options(self) -> dict[str, Any]:
        return {"num_registers": self.config.registers}

    def check(self) -> None:
        super().check()
        cfg = self.config
        if cfg.batch_size % cfg.num_generations:
            raise SolmError(f"--batch-size {cfg.batch_size} is not a multiple of "
                            f"--num-generations {cfg.num_generations}: each step takes whole "
                            f"groups")
        from solm.core.models import model_registers
        own = model_registers(cfg.model)
        if own is not None and own != cfg.registers:
            raise SolmError(f"{cfg.model} was trained with {own} registers; pass --registers "
                            f"{own}")

    def read_data(self) -> list[dict]:
        from solm.core.math_task import load_problems

        rows = load_problems(self.config.data, self.config.math_prompt, self.config.limit)
        return [{k: v for k, v in r.items() if k != "origin"} for r in rows]

    def data_collator(self, tokenizer, vocab) -> Callable:
        return lambda rows: rows  # GRPOTrainer batches prompts itself

    def prepare_data(self, rows: list[dict], tokenizer, vocab) -> PreparedData:
        from solm.core.provenance import file_sha256

        cfg = self.config
        self._vocab = vocab
        meta = {"path": str(cfg.data), "sha256": file_sha256(cfg.data), "problems": len(rows),
                "num_generations": cfg.num_generations, "kv_penalty": cfg.kv_penalty,
                "registers": cfg.registers, "policy": cfg.policy}
        return PreparedData(rows, [], meta)

    def arguments_class(self) -> type:
        from trl import GRPOConfig
        return GRPOConfig

    def extra_arguments(self) -> dict[str, Any]:
        cfg = self.config
        return dict(num_generations=cfg.num_generations,
                    max_completion_length=cfg.max_completion_length,
                    temperature=cfg.temperature, top_p=cfg.top_p, beta=cfg.beta,
                    epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high,
                    loss_type=cfg.loss_type, num_iterations=cfg.num_iterations,
                    scale_rewards=cfg.scale_rewards, log_completions=False,
                    shuffle_dataset=True)

    def training_arguments(self, *args, **kwargs):
        targs = super().training_arguments(*args, **kwargs)
        targs.train_sampling_strategy = "random"  # GRPO samples prompts in groups itself
        return targs

    def trainer_class(self) -> type:
        return tip_grpo_trainer_class(self._vocab, self.config.policy == "tip")

    def build_trainer(self, trainer_cls: type, **kwargs):
        import os

        cfg = self.config
        kwargs.pop("data_collator")
        kwargs.pop("compute_loss_func")
        reward = TipReward(cfg.kv_penalty, cfg.max_completion_length, cfg.num_generations)
        rollouts = TipRollouts(kwargs["processing_class"], cfg.registers, cfg.policy,
                               cfg.page_size, cfg.rollout_batch, cfg.max_completion_length,
                               cfg.temperature, cfg.top_p, cfg.seed)
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        trainer = trainer_cls(reward_funcs=[reward], rollout_func=rollouts, **kwargs)
        reward.trainer = trainer
        self.rollouts = rollouts
        return trainer

    def loss_label(self) -> str:
        return f"GRPO loss ({self.config.loss_type})"

    def write_plots(self, log_path: Path, out: Path) -> None:
        from solm.train.plots import plot_grpo_curves

        super().write_plots(log_path, out)
        plot_grpo_curves(log_path, out / "rollouts.png")
