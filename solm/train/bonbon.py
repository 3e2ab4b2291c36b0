"""BoNBoN alignment (Gui, Gârbacea & Veitch, "BoNBoN Alignment for Large Language Models and
the Sweetness of Best-of-n Sampling", NeurIPS 2024) on `pasta prefs` pairs.

The loss, on summed sequence log-probs (h below is a log-ratio of whole answers):

    L = α · L_SFT-BoN + (1 − α) · L_IPO-BoN
    L_SFT-BoN = − log π_θ(y_w | x)                                    (the best sample's NLL)
    L_IPO-BoN = ( h_θ(y_w, y_l) − 1 / (2 β*_n) )²
    h_θ(y_w, y_l) = log π_θ(y_w)/π_0(y_w) − log π_θ(y_l)/π_0(y_l)
    1 / (2 β*_n) = (n − 1) · Σ_{k=1}^{n−1} 1/k

with y_w the best and y_l the worst of n samples of π_0 (the frozen reference: this round's
starting model). The target is the paper's (§4, the IPO-BoN objective and its β*_n): the
best-of-n density is π_n(y) = n F(r(y))^{n−1} π_0(y) (F the reward's distribution function
under π_0), so log π_n/π_0 differs between the best and the worst sample by
(n − 1)(log U_(n) − log U_(1)) for the largest and smallest of n uniforms, whose expectation
is (n − 1)(−1/n + H_n) = (n − 1) H_{n−1}. `ipo_target` computes it; the tests check it
against that sum and against a Monte Carlo estimate of the order statistics. The published
code's `bonbon` path runs a DPO sigmoid with β as an input instead, so it is no oracle; TRL's
`ipo` averages log-probs per token, which changes the target's scale, so it is not used.

Why not TRL's `DPOTrainer`: a Pasta-Lang answer is scored under the structure it was sampled
under (4-D masks, Pred-10X positions, promise targets, forced tokens excluded:
`solm.train.sequence_logprobs`), which would replace its tokenization, collator, concatenated
forward and loss; what would remain is the reference handling. Here the reference's log-probs
are computed once before training (they never change: the reference is frozen), so no
second model is held and no gradient can reach it; the trainer is `SolmTrainer`'s (model,
LoRA, schedule, bf16, resume, multi-GPU, saving, solm.json).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from solm.core.errors import DataError, SolmError
from solm.core.settings import setting
from solm.core.systems.pasta import pasta_visible
from solm.train.base import PreparedData, SolmTrainer, TrainConfig
from solm.train.sequence_logprobs import SampledAnswer, batch_answers, sequence_logprobs


def ipo_target(n: int) -> float:
    """1 / (2 β*_n) = (n − 1) Σ_{k=1}^{n−1} 1/k: the expected log-ratio margin of the best
    over the worst of n samples under the best-of-n policy."""
    if n < 2:
        raise ValueError(f"best against worst needs n >= 2 samples, got {n}")
    return (n - 1) * sum(1.0 / k for k in range(1, n))


def bonbon_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                ref_chosen: torch.Tensor, ref_rejected: torch.Tensor, n: torch.Tensor,
                alpha: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Mean BoNBoN loss over pairs (every argument [P]: summed log-probs, and each pair's n)
    and its parts: `sft`, `ipo`, `margin` (h_θ) and `target`."""
    target = torch.tensor([ipo_target(int(k)) for k in n.tolist()],
                          dtype=policy_chosen.dtype, device=policy_chosen.device)
    margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    sft = -policy_chosen
    ipo = (margin - target) ** 2
    loss = alpha * sft + (1 - alpha) * ipo
    return loss.mean(), {"sft": sft.mean(), "ipo": ipo.mean(), "margin": margin.mean(),
                         "target": target.mean()}


@dataclass(kw_only=True)
class BonbonConfig(TrainConfig):
    """Settings of `pasta bonbon`; defaults are the thesis' (α 0.005, lr 5e-7)."""

    data: str = setting(help="Pairs JSONL from `pasta prefs` (chosen and rejected samples "
                             "as token ids, with n).", flags=("--data", "-d"))
    model: Optional[str] = setting(
        None, "The model trained, and BoNBoN's reference: the model the pairs were sampled "
        "from (default: the one the pairs file names; `pasta prefs` writes it in each pair).",
        flags=("--model", "-m"))
    alpha: float = setting(0.005, "Weight of the SFT term on the chosen sample (summed "
                                  "NLL); the IPO term gets 1 - alpha.", min=0, max=1)
    learning_rate: float = setting(5e-7, "Peak learning rate (linear decay to 0).",
                                   flags=("--lr",), cli_name="lr", above=0)
    epochs: float = setting(2.0, "Passes over the pairs.", above=0)
    eval_rows: int = setting(8, "Held-out pairs: their loss and implicit reward margin "
                                "(policy minus reference log-ratio, chosen minus rejected) "
                                "are logged at each evaluation.", min=0)
    max_len: int = setting(2048, "Pairs whose longer answer (with its prompt) has more "
                                 "tokens are skipped.", min=2)


def _answer(raw: Any, path: str, line: int, field: str) -> dict:
    if not isinstance(raw, dict):
        raise DataError("expected an object with ids, forced, ended", path=path, line=line,
                        field=field)
    ids = raw.get("ids")
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                            and t >= 0 for t in ids):
        raise DataError("expected a list of token ids (integers >= 0)", path=path, line=line,
                        field=f"{field}.ids")
    forced = raw.get("forced", [])
    if not isinstance(forced, list) or not all(isinstance(i, int) and 0 <= i < len(ids)
                                               for i in forced):
        raise DataError("expected indices into ids", path=path, line=line,
                        field=f"{field}.forced")
    ended = raw.get("ended", True)
    if not isinstance(ended, bool):
        raise DataError("expected true or false", path=path, line=line, field=f"{field}.ended")
    if not ids and not ended:
        # an answer the model ended at once is its end-of-sequence token alone (a real
        # sample, often the worst); with no token and no end there is nothing to score
        raise DataError("no token ids and not ended: nothing to score", path=path, line=line,
                        field=f"{field}.ids")
    return {"ids": ids, "forced": forced, "ended": ended}


def pairs_sampler(path: str) -> str | None:
    """The model a `pasta prefs` pairs file was sampled from (its first row's `model`, else
    the prefs folder's manifest), or None."""
    from pathlib import Path

    from solm.core.jsonl import read_jsonl_numbered
    from solm.core.provenance import MANIFEST_NAME, read_manifest

    if not Path(path).is_file():
        return None
    for _, raw in read_jsonl_numbered(path):
        if isinstance(raw.get("model"), str) and raw["model"]:
            return raw["model"]
        break
    manifest = Path(path).parent / MANIFEST_NAME
    if manifest.is_file():
        model = read_manifest(manifest).get("model")
        return model if isinstance(model, str) and model else None
    return None


def check_pair_ids(rows: list[dict], vocab_size: int, path: str) -> None:
    for row in rows:
        for side in ("chosen", "rejected"):
            bad = next((t for t in row[side]["ids"] if t >= vocab_size), None)
            if bad is not None:
                raise DataError(f"token id {bad} is outside the tokenizer ({vocab_size} "
                                f"tokens): were these pairs sampled from another model?",
                                path=path, line=row["line"], field=f"{side}.ids")


def load_pairs(path: str, limit: int | None = None) -> list[dict]:
    """Rows {id, prompt, system, n, chosen, rejected, text} of a `pasta prefs` pairs file."""
    from solm.core.jsonl import read_jsonl_numbered
    from solm.train.data import prompt_and_system

    rows = []
    for line, raw in read_jsonl_numbered(path):
        prompt, system = prompt_and_system(raw, path, line)
        n = raw.get("n")
        if not isinstance(n, int) or n < 2:
            raise DataError("expected the number of distinct samples (>= 2)", path=path,
                            line=line, field="n")
        chosen = _answer(raw.get("chosen"), path, line, "chosen")
        rejected = _answer(raw.get("rejected"), path, line, "rejected")
        rows.append({"id": str(raw.get("id", f"row-{line}")), "line": line, "prompt": prompt,
                     "system": system, "n": n, "chosen": chosen, "rejected": rejected,
                     "text": (raw.get("chosen") or {}).get("text", "")})
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DataError("no pairs", path=path)
    return rows


@dataclass
class PairCollator:
    """A batch of P pairs: 2P rows (the chosen answers, then the rejected ones) under the
    structure, with each pair's n and reference log-probs."""

    tokenizer: Any
    vocab: Any
    eos_id: int
    pad_id: int
    flex: bool = False  # the structure's attributes instead of a dense mask
    term = staticmethod(pasta_visible)

    def answers(self, row: dict) -> tuple[SampledAnswer, SampledAnswer]:
        from solm.core.chat import prompt_ids

        prompt = prompt_ids(self.tokenizer, row["prompt"], row.get("system"))
        return tuple(SampledAnswer(prompt, row[k]["ids"], row[k]["forced"], row[k]["ended"])
                     for k in ("chosen", "rejected"))

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        pairs = [self.answers(r) for r in rows]
        batch = batch_answers([c for c, _ in pairs] + [r for _, r in pairs], self.vocab,
                              self.eos_id, self.pad_id, self.flex)
        batch["n"] = torch.tensor([r["n"] for r in rows])
        if all("ref_chosen" in r for r in rows):
            batch["ref_chosen"] = torch.tensor([r["ref_chosen"] for r in rows])
            batch["ref_rejected"] = torch.tensor([r["ref_rejected"] for r in rows])
        return batch


def bonbon_trainer_class(alpha: float) -> type:
    from transformers import Trainer

    class BonbonHFTrainer(Trainer):
        """compute_loss: the BoNBoN loss of a batch of pairs; evaluation also logs the held-out
        pairs' implicit reward margin and its parts."""

        _eval_parts: list[dict[str, float]]

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # the loss is a mean over pairs, not a sum over tokens: the Trainer must divide
            # it by the accumulation steps itself
            self.model_accepts_loss_kwargs = False
            self._eval_parts = []

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            pairs = len(inputs["n"])
            logps = sequence_logprobs(model, inputs)
            ref = (inputs["ref_chosen"], inputs["ref_rejected"])  # the frozen parent's
            loss, parts = bonbon_loss(logps[:pairs], logps[pairs:], ref[0].to(logps.device),
                                      ref[1].to(logps.device), inputs["n"], alpha)
            if not model.training:
                self._eval_parts.append({k: float(v) for k, v in parts.items()} |
                                        {"pairs": pairs})
            return (loss, {"logps": logps}) if return_outputs else loss

        def evaluate(self, *args, **kwargs):
            self._eval_parts = []
            metrics = super().evaluate(*args, **kwargs)
            parts = self._eval_parts
            if parts:
                total = sum(p["pairs"] for p in parts)
                extra = {f"eval_{k}": sum(p[k] * p["pairs"] for p in parts) / total
                         for k in ("margin", "sft", "ipo", "target")}
                metrics.update(extra)
                self.log(extra)
            return metrics

    return BonbonHFTrainer


class BonbonTrainer(SolmTrainer):
    control_tokens = "pasta"
    config: BonbonConfig

    def check(self) -> None:
        super().check()  # paths first: an output that is an input is the first thing said
        cfg = self.config
        sampler = pairs_sampler(cfg.data)
        if cfg.model is None:
            if sampler is None:
                raise SolmError(f"{cfg.data}: the pairs do not name the model they were "
                                f"sampled from; give it with --model (BoNBoN's reference "
                                f"must be the sampler)")
            cfg.model = sampler
        elif sampler is not None and sampler != cfg.model:
            self.notices.append(f"--model {cfg.model} is not the model the pairs were sampled "
                                f"from ({sampler}): the reference is then not the sampler, "
                                f"which BoNBoN's objective assumes")

    def vocab_options(self) -> dict[str, Any]:
        """The position layout the model being tuned was trained with."""
        from solm.core.models import model_positions

        return {"positions": model_positions(self.config.model)}

    def read_data(self) -> list[dict]:
        return load_pairs(self.config.data, limit=self.config.limit)

    def data_collator(self, tokenizer, vocab) -> Callable:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        return PairCollator(tokenizer, vocab, tokenizer.eos_token_id, pad,
                            flex=self.attention() == "flex")

    def prepare_data(self, rows: list[dict], tokenizer, vocab) -> PreparedData:
        from solm.core.provenance import file_sha256
        from solm.train.data import split_rows

        cfg = self.config
        check_pair_ids(rows, len(tokenizer), cfg.data)
        collator = self.data_collator(tokenizer, vocab)

        def tokens(row: dict) -> int:
            c, r = collator.answers(row)
            return len(c.prompt_ids) + max(len(c.response_ids), len(r.response_ids)) + 1

        kept = [r for r in rows if tokens(r) <= cfg.max_len]
        if not kept:
            raise SolmError(f"{cfg.data}: every pair is longer than --max-len {cfg.max_len}")
        for r in kept:
            r["tagged"] = True  # split_rows counts tagged rows; every pair is PASTA's
        split = split_rows(kept, cfg.eval_rows, cfg.seed)
        ns = [r["n"] for r in kept]
        meta = {"path": str(cfg.data), "sha256": file_sha256(cfg.data), "pairs": len(kept),
                "skipped_too_long": len(rows) - len(kept), "train_pairs": len(split.train),
                "eval_pairs": len(split.eval), "n_min": min(ns), "n_max": max(ns),
                "alpha": cfg.alpha, "ipo_target_by_n": {str(k): round(ipo_target(k), 4)
                                                        for k in sorted(set(ns))}}
        return PreparedData(split.train, split.eval, meta)

    def before_training(self, model, tokenizer, vocab, data: PreparedData, args) -> None:
        """The reference's summed log-probs of every pair, once: the model is the round's
        starting checkpoint here (LoRA adapters start as the identity), frozen in effect."""
        collator = self.data_collator(tokenizer, vocab)
        rows = data.train + data.eval
        device = args.device
        model.to(device)
        was_training = model.training
        model.eval()
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bool(args.bf16))
        with torch.no_grad(), autocast:
            for start in range(0, len(rows), max(1, self.config.micro_batch_size)):
                chunk = rows[start:start + max(1, self.config.micro_batch_size)]
                logps = sequence_logprobs(model, collator(chunk)).float().cpu()
                for i, r in enumerate(chunk):
                    r["ref_chosen"] = float(logps[i])
                    r["ref_rejected"] = float(logps[len(chunk) + i])
        model.train(was_training)

    def training_arguments(self, *args, **kwargs):
        targs = super().training_arguments(*args, **kwargs)
        targs.prediction_loss_only = True  # evaluation logs the loss and the margin
        return targs

    def trainer_class(self) -> type:
        return bonbon_trainer_class(self.config.alpha)

    def loss_label(self) -> str:
        return f"BoNBoN loss (alpha {self.config.alpha:g})"
