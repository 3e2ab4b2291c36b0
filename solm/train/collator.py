"""Batches for Pasta-SFT whose masks, positions and targets come from core structure().

The targets of structure() are "the next token of the same thread", not "the next token in the
sequence", so they are handed to Hugging Face models pre-shifted: the model's own causal-LM loss
compares logits[i] with labels[i + 1], so labels = [IGNORE] + targets[:-1]. Prompt tokens carry
no loss; the last prompt token predicts the first response token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from solm.core.chat import prompt_ids, text_ids
from solm.core.pasta_lang import strip
from solm.core.structure import IGNORE, MaskTerm, pairwise
from solm.core.systems.pasta import ATTR_NAMES, PastaVocab, pasta_visible, structure


class StructuredExample:
    """An example carrying its structure's term and attributes; the dense mask is built only
    when a batch asks for it (never in FlexAttention mode)."""

    term: MaskTerm
    attrs: dict[str, torch.Tensor]

    @property
    def visible(self) -> torch.Tensor:
        """Bool [T, T] (the structure's rule over this example's attributes)."""
        return pairwise(self.term, self.attrs, self.attrs)


@dataclass
class PastaExample(StructuredExample):
    input_ids: list[int]
    position_ids: list[int]
    term: MaskTerm
    targets: list[int]  # per token: what it predicts (IGNORE for prompt tokens)
    prompt_len: int
    attrs: dict[str, torch.Tensor]  # what the mask terms read


@dataclass
class PastaCollator:
    tokenizer: Any
    vocab: PastaVocab
    max_len: int = 2048
    strip_annotations: bool = False  # Baseline-SFT: the same rows with tags removed
    # flex: batches carry the structure's attributes (the trainer builds a BlockMask from
    # `term`) instead of a dense [B, 1, T, T] mask
    flex: bool = False
    term = staticmethod(pasta_visible)

    def encode(self, row: dict) -> PastaExample:
        prompt = prompt_ids(self.tokenizer, row["prompt"], row.get("system"))
        text = row["text"] if "text" in row else (row.get("annotated") or row["response"])
        if self.strip_annotations:
            text = strip(text)
        response = text_ids(self.tokenizer, text) + [self.tokenizer.eos_token_id]
        ids = (prompt + response)[: self.max_len]
        s = structure(ids, self.vocab)
        targets = s.targets.tolist()
        for i in range(min(len(prompt) - 1, len(targets))):
            targets[i] = IGNORE
        return PastaExample(ids, s.position_ids.tolist(), s.term, targets, len(prompt),
                            {n: s.attrs[n] for n in ATTR_NAMES})

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return collate_examples([self.encode(r) for r in rows], pad, self.flex)


def collate_examples(examples: list[PastaExample], pad: int, flex: bool = False
                     ) -> dict[str, torch.Tensor]:
    """A padded batch: ids, Pred-10X positions, labels pre-shifted for HF's loss, and the
    structure's masks (dense [B, 1, T, T], or the attributes for FlexAttention, the length
    padded to whole blocks)."""
    n = batch_length(examples, flex)
    b = len(examples)
    input_ids = torch.full((b, n), pad, dtype=torch.long)
    position_ids = torch.zeros((b, n), dtype=torch.long)
    labels = torch.full((b, n), IGNORE, dtype=torch.long)
    for i, e in enumerate(examples):
        t = len(e.input_ids)
        input_ids[i, :t] = torch.tensor(e.input_ids)
        position_ids[i, :t] = torch.tensor(e.position_ids)
        labels[i, 1:t] = torch.tensor(e.targets[: t - 1])  # pre-shifted for HF's loss
    batch = {"input_ids": input_ids, "position_ids": position_ids, "labels": labels}
    return add_structure_masks(batch, examples, flex)


def batch_length(examples: list, flex: bool) -> int:
    """The padded length of a batch: its longest example, rounded up to whole FlexAttention
    blocks in flex mode (a bounded number of compiled shapes)."""
    n = max(len(e.input_ids) for e in examples)
    if flex:
        from solm.train.flex import padded_length
        n = padded_length(n)
    return n


def add_structure_masks(batch: dict, examples: list, flex: bool = False) -> dict:
    """Add each example's structure to a padded batch: a dense [B, 1, T, T] mask (padding
    rows see only themselves, so no softmax row is empty), or, for FlexAttention, the
    structure's attributes and lengths. Examples carry `input_ids`, `visible`, `attrs`."""
    b, n = batch["input_ids"].shape
    if flex:
        names = list(examples[0].attrs)  # the structure's own attributes (any system)
        attrs = {name: torch.zeros((b, n), dtype=torch.long) for name in names}
        for i, e in enumerate(examples):
            for name in names:
                attrs[name][i, :len(e.input_ids)] = e.attrs[name]
        batch["structure_attrs"] = attrs
        batch["lengths"] = torch.tensor([len(e.input_ids) for e in examples])
        return batch
    visible = torch.eye(n, dtype=torch.bool).repeat(b, 1, 1)
    for i, e in enumerate(examples):
        t = len(e.input_ids)
        visible[i, :t, :t] = e.visible
    batch["attention_mask"] = visible[:, None]
    return batch
