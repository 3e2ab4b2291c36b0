"""TIP-SFT and its Dense baseline: supervised finetuning on register-annotated reasoning traces.

Batches come from `TipCollator`: mask, positions and targets from
`solm.core.systems.tip.structure`, so a token never sees a step that a reused register killed
before it (the paged runtime frees exactly those pages: `tests/test_tip_runtime.py` holds the
two equal). The Dense baseline (`--strip-registers`) trains on the same traces with the
registers removed, under the plain causal mask, so the two models differ only in the
registers. Prompts are the problem plus the maths instruction (`solm.core.math_task`), as
`tip grpo` and `tip eval` write them. Everything else is `solm.train.base`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from solm.core.errors import DataError, SolmError
from solm.core.settings import setting
from solm.train.base import PreparedData, SolmTrainer, TrainConfig
from solm.train.collator import PastaExample, collate_examples
from solm.train.data import prompt_and_system, split_rows

_REGISTER = re.compile(r"<reg_(\d+)>")


@dataclass(kw_only=True)
class TipSFTConfig(TrainConfig):
    """Settings of `tip sft`."""

    data: str = setting(help="JSONL with `prompt` and a register-annotated `annotated` (from "
                             "`tip annotate`).", flags=("--data", "-d"))
    registers: int = setting(16, "Thought registers <reg_0> ... <reg_{N-1}> the tokenizer "
                                 "gets (the traces must use no other).", min=1)
    strip_registers: bool = setting(False, "Dense baseline: remove the registers and train "
                                           "on the plain traces (causal mask).")
    math_prompt: bool = setting(True, "Append the maths instruction (final answer in "
                                      "\\\\boxed{}) to each prompt, as tip grpo / tip eval do.")
    max_len: int = setting(1024, "Rows with more prompt + response tokens are skipped.",
                           min=2)


def load_tip_rows(path: str, registers: int, strip: bool, math_prompt: bool,
                  limit: int | None = None) -> list[dict]:
    """Rows {id, prompt, system, text, tagged}: the annotated trace (or, stripped, the plain
    one); every register must be one of the N."""
    from solm.annotate.tip_rules import strip_registers
    from solm.core.jsonl import read_jsonl_numbered
    from solm.core.math_task import math_prompt as with_instruction

    rows = []
    for line, raw in read_jsonl_numbered(path):
        prompt, system = prompt_and_system(raw, path, line)
        text = raw.get("annotated")
        if not isinstance(text, str) or not text.strip():
            raise DataError("expected the register-annotated trace (from `tip annotate`)",
                            path=path, line=line, field="annotated")
        beyond = [int(i) for i in _REGISTER.findall(text) if int(i) >= registers]
        if beyond:
            raise DataError(f"<reg_{beyond[0]}> but --registers is {registers}", path=path,
                            line=line, field="annotated")
        tagged = bool(_REGISTER.search(text))
        annotated = text
        if strip:
            text, tagged = strip_registers(text), False
        rows.append({"id": str(raw.get("id", f"row-{line}")),
                     "prompt": with_instruction(prompt) if math_prompt else prompt,
                     "system": system, "text": text, "tagged": tagged,
                     # the length filter reads this: TIP and Dense keep the same rows
                     "longest_text": annotated})
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DataError("no training rows", path=path)
    return rows


@dataclass
class TipCollator:
    """Prompt + trace + EOS, under TIP's structure (a dead step is invisible)."""

    tokenizer: Any
    vocab: Any  # TipVocab
    max_len: int = 1024
    flex: bool = False

    @property
    def term(self):
        from solm.core.systems.tip import tip_visible
        return tip_visible

    def encode(self, row: dict) -> PastaExample:
        from solm.core.chat import prompt_ids, text_ids

        prompt = prompt_ids(self.tokenizer, row["prompt"], row.get("system"))
        response = text_ids(self.tokenizer, row["text"]) + [self.tokenizer.eos_token_id]
        return self.encode_ids(prompt, response)

    def encode_ids(self, prompt: list[int], response: list[int]) -> PastaExample:
        from solm.core.structure import IGNORE
        from solm.core.systems.tip import structure

        ids = (prompt + response)[: self.max_len]
        s = structure(ids, self.vocab, prompt_len=len(prompt))
        targets = s.targets.tolist()
        for i in range(min(len(prompt) - 1, len(targets))):
            targets[i] = IGNORE
        return PastaExample(ids, s.position_ids.tolist(), s.term, targets, len(prompt),
                            dict(s.attrs))

    def __call__(self, rows: list[dict]):
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return collate_examples([self.encode(r) for r in rows], pad, self.flex)


class TipSFTTrainer(SolmTrainer):
    control_tokens = "tip"
    config: TipSFTConfig
    strip_setting, plain_system = "strip_registers", "dense"

    def prompt_instruction(self, tokenizer) -> str | None:
        from solm.core.math_task import INSTRUCTION

        return INSTRUCTION if self.config.math_prompt else super().prompt_instruction(tokenizer)

    def control_token_options(self) -> dict[str, Any]:
        return {"num_registers": self.config.registers}

    def read_data(self) -> list[dict]:
        cfg = self.config
        return load_tip_rows(cfg.data, cfg.registers, cfg.strip_registers, cfg.math_prompt,
                             cfg.limit)

    def data_collator(self, tokenizer, vocab) -> Callable:
        return TipCollator(tokenizer, vocab, self.config.max_len,
                           flex=self.attention() == "flex")

    def prepare_data(self, rows: list[dict], tokenizer, vocab) -> PreparedData:
        from solm.annotate.tip_rules import strip_registers
        from solm.core.chat import prompt_ids, text_ids
        from solm.core.provenance import file_sha256

        cfg = self.config

        def length(r: dict) -> int:
            return len(prompt_ids(tokenizer, r["prompt"], r.get("system"))) + \
                len(text_ids(tokenizer, r["longest_text"])) + 1

        kept = [r for r in rows if length(r) <= cfg.max_len]
        if not kept:
            raise SolmError(f"{cfg.data}: every row is longer than --max-len {cfg.max_len}")
        split = split_rows(kept, cfg.eval_rows, cfg.seed)
        killed = sum(1 for r in split.train
                     if _reuses(r["text"]) and not cfg.strip_registers)
        meta = {"path": str(cfg.data), "sha256": file_sha256(cfg.data), "rows": len(kept),
                "skipped_too_long": len(rows) - len(kept), "train_rows": len(split.train),
                "eval_rows": len(split.eval), "registers": cfg.registers,
                "strip_registers": cfg.strip_registers,
                "train_rows_reusing_a_register": killed,
                "plain_chars": sum(len(strip_registers(r["text"])) for r in kept)}
        return PreparedData(split.train, split.eval, meta)


def _reuses(text: str) -> bool:
    seen: set[str] = set()
    for r in _REGISTER.findall(text):
        if r in seen:
            return True
        seen.add(r)
    return False
