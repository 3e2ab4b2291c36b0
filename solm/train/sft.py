"""Pasta-SFT and Baseline-SFT: supervised finetuning on Pasta-Lang rows with structure masks.

Batches come from `PastaCollator` (masks, Pred-10X positions and targets from
`solm.core.systems.pasta.structure`); everything else (model, LoRA, schedule, resume, saving)
is `solm.train.base`. Baseline-SFT trains on the same rows with the tags removed, so the two
models differ only in the annotation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from solm.core.errors import SolmError
from solm.core.settings import setting
from solm.core.systems.pasta import POSITIONS, POSITIONS_HELP
from solm.train.base import PreparedData, SolmTrainer, TrainConfig
from solm.train.data import load_sft_rows, split_rows


@dataclass(kw_only=True)
class PastaSFTConfig(TrainConfig):
    """Settings of `pasta sft`; defaults are the paper's schedule."""

    data: str = setting(help="JSONL with `prompt` and `annotated` (from `pasta annotate`); rows "
                             "without tags train as plain text.", flags=("--data", "-d"))
    strip_annotations: bool = setting(False, "Baseline-SFT: remove the tags and train on the "
                                             "plain text of the same rows.")
    max_len: int = setting(2048, "Rows with more prompt + response tokens are skipped (see "
                                 "--truncate).", min=2)
    truncate: bool = setting(False, "Cut long rows to --max-len instead.")
    control_token_loss_weight: float = setting(
        1.0, "Targets that are control tokens (promise, topic closers, async, sync) count this "
             "many times in the training loss; held-out loss stays unweighted.", above=0)
    positions: str = setting("pred10x", POSITIONS_HELP, choices=POSITIONS)


def drop_long_rows(rows: list[dict], collator) -> tuple[list[dict], int]:
    """Rows whose prompt + response fit in max_len tokens: a truncated Pasta-Lang response
    ends inside an open block and would teach the model to stop there."""
    from solm.core.chat import prompt_ids, text_ids

    tok = collator.tokenizer
    kept = [r for r in rows if len(prompt_ids(tok, r["prompt"], r.get("system")))
            + len(text_ids(tok, r.get("longest_text", r["text"]))) + 1 <= collator.max_len]
    return kept, len(rows) - len(kept)


class PastaSFTTrainer(SolmTrainer):
    control_tokens = "pasta"
    config: PastaSFTConfig
    strip_setting, plain_system = "strip_annotations", "baseline"

    def read_data(self) -> list[dict]:
        cfg = self.config
        return load_sft_rows(cfg.data, strip_annotations=cfg.strip_annotations, limit=cfg.limit)

    def vocab_options(self) -> dict:
        return {"positions": self.config.positions}

    def data_collator(self, tokenizer, vocab):
        from solm.train.collator import PastaCollator
        return PastaCollator(tokenizer, vocab, max_len=self.config.max_len,
                             flex=self.attention() == "flex")

    def prepare_data(self, rows: list[dict], tokenizer, vocab) -> PreparedData:
        from solm.core.provenance import file_sha256

        cfg = self.config
        collator = self.data_collator(tokenizer, vocab)
        rows, too_long = drop_long_rows(rows, collator) if not cfg.truncate else (rows, 0)
        if not rows:
            raise SolmError(f"{cfg.data}: every row is longer than --max-len {cfg.max_len} "
                            f"tokens")
        split = split_rows(rows, cfg.eval_rows, cfg.seed)
        meta = {"path": str(cfg.data), "sha256": file_sha256(cfg.data), "rows": len(rows),
                "skipped_too_long": too_long, "train_rows": len(split.train),
                "eval_rows": len(split.eval), "tagged_train_rows": split.annotated}
        return PreparedData(split.train, split.eval, meta)

    def compute_loss_func(self, model, vocab) -> Callable | None:
        weight = self.config.control_token_loss_weight
        if weight == 1.0:
            return None
        from solm.train.losses import weighted_token_loss
        return weighted_token_loss(model, vocab.control_ids, weight)

    def loss_label(self) -> str:
        weight = self.config.control_token_loss_weight
        return "train loss" if weight == 1.0 else f"train loss (control tokens x{weight:g})"
