"""Summed log-probs of sampled Pasta-Lang answers under the structure they were sampled under.

A sampled answer (the runtime's `ids`, in training order) is scored the way training reads
it: masks, Pred-10X positions and targets all come from `solm.core.systems.pasta.structure`,
so each token is predicted by the previous token of its own thread, as it was when the
runtime sampled it. What is summed is the model's choices only:

- prompt tokens are no target;
- tokens the runtime forced are no target either: every block's `<async>` (a thread's first
  token, never a target in the structure anyway) and a `</async>` the runtime put in the
  place of an end-of-sequence or of a block past its cap, or added when a cap stopped
  decoding (`PastaDecodeResult.forced`);
- an answer that ended by the model's end-of-sequence token gets that token appended and
  counted (the runtime sampled it, though the ids leave it out); one a cap stopped does not.

The sum is what `BatchedPastaRuntime` reports as the sampled tokens' raw log-probs (the
model's log-softmax at temperature 1, before grammar masks and penalties): the tests hold the
two equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F

from solm.core.structure import IGNORE
from solm.core.systems.pasta import (ATTR_NAMES, PastaVocab, pasta_visible, structure,
                                     walk_with_predictors)
from solm.train.collator import PastaExample, collate_examples
from solm.train.flex import compile_settings_for, model_attention_mask


@dataclass
class SampledAnswer:
    prompt_ids: list[int]
    response_ids: list[int]  # training order, as the runtime returns them
    forced: Sequence[int] = field(default_factory=list)  # indices into response_ids
    ended: bool = True  # ended by the model's end-of-sequence token


def encode_answer(answer: SampledAnswer, vocab: PastaVocab, eos_id: int) -> PastaExample:
    """The answer's training example with only the model's own choices as targets."""
    p = len(answer.prompt_ids)
    ids = [*answer.prompt_ids, *answer.response_ids, *([eos_id] if answer.ended else [])]
    s = structure(ids, vocab)
    _, _, predictor = walk_with_predictors(ids, vocab)
    targets = s.targets.tolist()
    for i in range(p - 1):
        targets[i] = IGNORE
    for f in answer.forced:
        if not 0 <= f < len(answer.response_ids):
            raise ValueError(f"forced index {f} is outside the response "
                             f"({len(answer.response_ids)} tokens)")
        source = predictor[p + f]
        if source >= 0:
            targets[source] = IGNORE
    return PastaExample(ids, s.position_ids.tolist(), s.term, targets, p,
                        {n: s.attrs[n] for n in ATTR_NAMES})


def batch_answers(answers: Sequence[SampledAnswer], vocab: PastaVocab, eos_id: int,
                  pad_id: int, flex: bool = False) -> dict[str, torch.Tensor]:
    """The answers collated (`flex`: the structure's attributes instead of a dense mask)."""
    return collate_examples([encode_answer(a, vocab, eos_id) for a in answers], pad_id, flex)


def sequence_logprobs(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[B] summed log-probs of each row's targets (labels pre-shifted, as collated)."""
    return token_logprobs(model, batch).sum(-1)


def token_logprobs(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[B, T - 1] log-prob of each position's target (0 where none), as `sequence_logprobs`
    sums them: position k's entry is the log-prob of the token k predicts."""
    device = next(model.parameters()).device
    with compile_settings_for(model):
        out = model(input_ids=batch["input_ids"].to(device),
                    position_ids=batch["position_ids"].to(device),
                    attention_mask=model_attention_mask(model, batch, pasta_visible, device))
    logits = out.logits[:, :-1].float()
    labels = batch["labels"][:, 1:].to(device)
    return -F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE,
                            reduction="none")
