"""`pdiff sft`: one model trained to plan autoregressively and to denoise chunks, in one pass.

Rows are Pasta-Lang annotated answers (`pasta annotate`); each is laid out in Planned
Diffusion's slots (`solm.core.systems.pdiff.to_slots`: 10 x N slots per chunk, a random 0-10
extra pads inside them) and read by `pdiff.structure`, so every sequence takes one forward
pass under one mask: the plan and main thread causal, each chunk bidirectional inside, seeing
the context before it but not its siblings, invisible to later tokens until `<sync/>`.

Per sequence one t = (1 - eps) U + eps (U uniform on [0, 1), eps = 1e-3); each diffusable
chunk slot (between `<async>` and `</async>`) is replaced by the mask token with probability
t. The loss of a sequence:

    L = ( sum_AR CE(main token)  +  (1/t) sum_masked CE(chunk token) ) / (A + D)

With chunk blocks (`--block-size B`, `pdiff.slot_block`), each chunk draws one of its
blocks that hold diffusable slots, uniformly (n of them), and masks only that block's slots
with probability t: the blocks before it stay clean, as the sampler sees them (a block
reads the chunk's finished blocks), and the blocks after it cannot be seen from it. Its
masked slots count n / t each, so that in expectation the sum still covers every
diffusable slot of the chunk once (the same normalisation by A + D).

with A the autoregressive targets (response main-thread tokens, EOS included) and D the
diffusable chunk slots, masked or not. Why this weighting and normalisation:
- (1/t) sum_masked is the masked-diffusion ELBO's Monte-Carlo term: its expectation over the
  masking is the mean per-token loss of the D chunk slots times D, so the numerator is, in
  expectation, a sum over A + D token losses, and dividing by A + D makes it a per-token
  mean on the scale of the AR loss alone (and of `pasta sft`'s loss).
- The AR terms are *not* divided by t. The published code divides them by t as well; nothing
  in the AR likelihood depends on t (those tokens are never masked), and 1/t reaches 1,000 at
  t = eps, so that weighting turns the plan's loss into noise and lets a few low-t draws
  dominate the gradient.
- Each sequence weighs the same (the published code asserts batch size 1, where per-sequence
  and per-batch normalisation agree); micro-batches average their sequences and gradient
  accumulation averages micro-batches (the Trainer divides by the accumulation steps).

One shift convention: masked token j is predicted from the logits at `pdiff.predictor(j)` =
j - 1, as an autoregressive base model predicts token j; the sampler reads the same row
(`solm.decode.pdiff`). In HF's pre-shifted label layout (logits[i] scores labels[i + 1]),
that puts the masked token's label at index j itself, exactly where the AR rule puts the
next-token label of token j - 1; a chunk's first content slot is predicted by `<async>`.

Everything else (model, LoRA, schedule, resume, saving) is `solm.train.base`, as for
`pasta sft`. Held-out rows are masked with a seed of their own, so the eval loss of one run
compares across steps.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from solm.core.control_tokens import PAD_CYCLE
from solm.core.errors import SolmError
from solm.core.settings import setting
from solm.core.systems.pasta import POSITIONS, POSITIONS_HELP
from solm.core.systems.pdiff import LAYOUTS
from solm.core.structure import IGNORE, MaskTerm
from solm.train.collator import StructuredExample, add_structure_masks, batch_length
from solm.train.base import PreparedData, SolmTrainer, TrainConfig
from solm.train.data import load_sft_rows, split_rows

AR, DIFFUSION = 1, 2  # what a label is, in `loss_kind`
MASK_EPS = 1e-3


@dataclass(kw_only=True)
class PdiffSFTConfig(TrainConfig):
    """Settings of `pdiff sft`."""

    data: str = setting(help="JSONL with `prompt` and a Pasta-Lang `annotated` answer (from "
                             "`pasta annotate`); rows without tags train as plain text "
                             "(autoregressive loss only).", flags=("--data", "-d"))
    max_len: int = setting(2048, "Rows longer than this (in the slot layout, with the most "
                                 "extra pads) are skipped.", min=8)
    extra_pads: int = setting(10, "Each chunk gets a random 0..N extra pads inside its slots "
                                  "(the published method uses 10; 0: only the pads the "
                                  "promise leaves).", min=0, max=10)
    mask_eps: float = setting(MASK_EPS, "The smallest masking rate: t = eps + (max - eps) U "
                                        "(U uniform on [0, 1)).", above=0, max=1)
    mask_max: float = setting(1.0, "The largest masking rate (BD3-LM's clipped schedules draw "
                                   "t from a band such as 0.3-0.8: lower variance, which "
                                   "matters most for small blocks).", above=0, max=1)
    layout: str = setting("one-copy", "one-copy: the chunks' slots masked in place (blocks: "
                                      "one drawn per chunk); two-copy: BD3-LM's, a noised copy "
                                      "of every chunk beside the clean one, so every block of "
                                      "every chunk is trained in each pass (main tokens after "
                                      "<sync/> read the clean chunks).", choices=LAYOUTS)
    soft_target: Optional[str] = setting(None, "An autoregressive model (e.g. the Baseline-"
                                               "SFT) whose next-token distribution on the "
                                               "answer read in order is a soft target for "
                                               "each masked content slot.")
    soft_target_weight: float = setting(0.5, "With --soft-target: a masked content slot's "
                                             "loss is (1 - w) x its cross-entropy + w x the "
                                             "cross-entropy against the model's distribution.",
                                        min=0, max=1)
    control_token_loss_weight: float = setting(
        1.0, "Autoregressive targets that are control tokens (promise, topic closers, sync) "
             "count this many times in the training loss (as in `pasta sft`); held-out loss "
             "stays unweighted.", above=0)
    positions: str = setting("pred10x", POSITIONS_HELP, choices=POSITIONS)
    pad_cycle: int = setting(PAD_CYCLE, "Distinct pad tokens a chunk's pads cycle through "
                                        "(Rainbow Padding; 1: one pad token, as models "
                                        "trained before the cycle).", min=1, max=PAD_CYCLE)
    block_size: int = setting(0, "Denoise each chunk in blocks of this many slots, left to "
                                 "right, each block seeing the chunk's finished blocks "
                                 "(BD3-LM); recorded in the model, which decodes the same "
                                 "way. 0: the whole chunk at once.", min=0)


@dataclass
class PdiffExample(StructuredExample):
    input_ids: list[int]  # with the masked chunk slots replaced by the mask token
    position_ids: list[int]
    term: MaskTerm
    labels: list[int]  # pre-shifted: logits[i] scores labels[i + 1]
    kinds: list[int]  # per label: 0 none, AR or DIFFUSION
    control: list[bool]  # per label: an AR target that is a control token
    t: float
    scale: list[float]  # per label: a DIFFUSION label's count over 1/t (its chunk's blocks)
    norm: int  # A + D
    attrs: dict[str, torch.Tensor]
    # --soft-target: the answer read in order (tags and pads left out), and per label the
    # row of it whose next-token distribution is that DIFFUSION label's soft target (-1 none)
    plain_ids: list[int] = field(default_factory=list)
    soft_rows: list[int] = field(default_factory=list)


def sample_masking(diffusable: list[int], rng: random.Random, eps: float,
                   high: float = 1.0) -> tuple[float, list[int]]:
    """(t, the indices masked): t = eps + (high - eps) U, each diffusable slot masked with
    probability t (high 1: the published method's (1 - eps) U + eps)."""
    t = eps + (high - eps) * rng.random()
    return t, [j for j in diffusable if rng.random() < t]


def active_blocks(diffusable: list[int], chunk: list[int], block: list[int],
                  rng: random.Random) -> tuple[list[int], dict[int, int]]:
    """(the diffusable slots of one block drawn per chunk, {slot: its chunk's count of
    blocks}): `chunk[j]` and `block[j]` are slot j's chunk and block."""
    blocks: dict[int, list[int]] = {}
    for j in diffusable:
        blocks.setdefault(chunk[j], [])
        if block[j] not in blocks[chunk[j]]:
            blocks[chunk[j]].append(block[j])
    drawn = {c: rng.choice(sorted(bs)) for c, bs in blocks.items()}
    kept = [j for j in diffusable if block[j] == drawn[chunk[j]]]
    return kept, {j: len(blocks[chunk[j]]) for j in kept}


@dataclass
class PdiffCollator:
    """Prompt + answer in the slot layout + EOS, masked, under `pdiff.structure`."""

    tokenizer: Any
    vocab: Any  # PdiffVocab
    max_len: int = 2048
    extra_pads: int = 10
    eps: float = MASK_EPS
    seed: int = 0
    flex: bool = False
    mask_max: float = 1.0
    copy_layout: str = "one-copy"  # `--layout` (the method `layout` lays a row out)
    soft_targets: bool = False  # build the rows a soft-target teacher reads

    epoch: int = 0  # set by the trainer as each epoch begins (`EpochToCollator`)

    def __post_init__(self):
        self._rng = random.Random(self.seed)

    @property
    def term(self):
        from solm.core.systems.pdiff import pdiff_visible
        return pdiff_visible

    def layout(self, row: dict, rng: random.Random, most: bool = False) -> tuple[list[int], int]:
        """(prompt + laid-out answer + EOS, prompt length); `most`: every chunk with the
        most extra pads (the length filter's worst case)."""
        from solm.core.chat import prompt_ids, text_ids
        from solm.core.systems.pdiff import to_slots

        prompt = prompt_ids(self.tokenizer, row["prompt"], row.get("system"))
        answer = text_ids(self.tokenizer, row["text"])
        extra = (lambda: self.extra_pads) if most else (lambda: rng.randint(0, self.extra_pads))
        return prompt + to_slots(answer, self.vocab, extra) + [self.tokenizer.eos_token_id], \
            len(prompt)

    def encode(self, row: dict, rng: random.Random | None = None) -> PdiffExample:
        rng = rng if rng is not None else self._rng
        ids, prompt_len = self.layout(row, rng)
        return self.encode_ids(ids[: self.max_len], prompt_len, rng)

    def encode_ids(self, ids: list[int], prompt_len: int, rng: random.Random) -> PdiffExample:
        if self.copy_layout == "two-copy":
            return self.encode_two_copy(ids, prompt_len, rng)
        from solm.core.systems.pdiff import predictor, structure

        s = structure(ids, self.vocab, prompt_len=prompt_len)
        n = len(ids)
        labels, kinds = [IGNORE] * n, [0] * n
        for i, target in enumerate(s.targets.tolist()):
            if i >= prompt_len - 1 and target != IGNORE and i + 1 < n:
                labels[i + 1], kinds[i + 1] = target, AR
        diffusable = [j for j in range(n) if s.attrs["diffusable"][j]]
        counts: dict[int, int] = {}
        if self.vocab.block_size > 0:
            diffusable_all = diffusable
            diffusable, counts = active_blocks(diffusable, s.attrs["thread"].tolist(),
                                               s.attrs["block"].tolist(), rng)
        t, masked = sample_masking(diffusable, rng, self.eps, self.mask_max)
        inputs = list(ids)
        scale = [1.0] * n
        for j in masked:
            row = predictor(j)  # the logits row that predicts masked token j
            if kinds[row + 1]:
                raise SolmError(f"token {j}: its predicting row {row} already has a target")
            labels[row + 1], kinds[row + 1] = ids[j], DIFFUSION
            scale[row + 1] = float(counts.get(j, 1))
            inputs[j] = self.vocab.mask
        if self.vocab.block_size > 0:
            diffusable = diffusable_all
        norm = sum(k == AR for k in kinds) + len(diffusable)
        controls = set(self.vocab.control_ids)
        control = [k == AR and lab in controls for k, lab in zip(kinds, labels)]
        return PdiffExample(inputs, s.position_ids.tolist(), s.term, labels, kinds, control,
                            t, scale, max(norm, 1), dict(s.attrs))

    def encode_two_copy(self, ids: list[int], prompt_len: int,
                        rng: random.Random) -> PdiffExample:
        """The two-copy layout (`pdiff.two_copy`): AR labels on the clean rows as before;
        each noised diffusable slot masked with probability t, its label at its predictor
        row (`pdiff.two_copy_predictors`), counted 1/t: every block of every chunk in the
        one pass."""
        from solm.core.systems.pdiff import two_copy, two_copy_predictors

        s = two_copy(ids, self.vocab, prompt_len=prompt_len)
        n, total = len(ids), len(s.attrs["copy"])
        labels, kinds = [IGNORE] * total, [0] * total
        for i, target in enumerate(s.targets[:n].tolist()):
            if i >= prompt_len - 1 and target != IGNORE and i + 1 < n:
                labels[i + 1], kinds[i + 1] = target, AR
        source = s.attrs["source"].tolist()
        inputs = [ids[j] for j in source]
        diffusable = [x for x in range(n, total) if s.attrs["diffusable"][x]]
        t, masked = sample_masking(diffusable, rng, self.eps, self.mask_max)
        rows = two_copy_predictors(s).tolist()
        soft = [-1] * total
        plain_at = self._plain_index(ids, s) if self.soft_targets else {}
        for x in masked:
            row = rows[x]
            if kinds[row + 1]:
                raise SolmError(f"slot {x}: its predicting row {row} already has a target")
            labels[row + 1], kinds[row + 1] = ids[source[x]], DIFFUSION
            inputs[x] = self.vocab.mask
            if source[x] in plain_at and plain_at[source[x]] > 0:
                soft[row + 1] = plain_at[source[x]] - 1
        norm = sum(k == AR for k in kinds) + len(diffusable)
        controls = set(self.vocab.control_ids)
        control = [k == AR and lab in controls for k, lab in zip(kinds, labels)]
        plain = [ids[j] for j in sorted(plain_at, key=plain_at.get)] if self.soft_targets \
            else []
        return PdiffExample(inputs, s.position_ids.tolist(), s.term, labels, kinds, control,
                            t, [1.0] * total, max(norm, 1), dict(s.attrs), plain, soft)

    def _plain_index(self, ids: list[int], s) -> dict[int, int]:
        """Row of the layout -> its index in the answer read in order: the prompt and every
        content token (main text and chunk content), tags and pads left out."""
        from solm.core.systems.pasta import walk_training_order

        attrs, _ = walk_training_order(ids, self.vocab)
        pads = set(self.vocab.pads)
        keep = [j for j, (tok, a) in enumerate(zip(ids, attrs))
                if not a.is_tag and tok not in pads and tok != self.vocab.mask]
        return {j: k for k, j in enumerate(keep)}

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        examples = []
        for r in rows:
            # each row's masking from its own seed: held-out rows the same at every evaluation,
            # a training row anew each epoch, so what a row is trained on does not depend on
            # which process of a data-parallel run collates it, nor on a resume
            key = f"{self.seed}:{r['id']}" + ("" if r.get("held_out") else f":{self.epoch}")
            examples.append(self.encode(r, random.Random(zlib.crc32(key.encode()))))
        return collate(examples, self.tokenizer.pad_token_id or 0, self.flex)


def collate(examples: list[PdiffExample], pad: int, flex: bool = False) -> dict:
    n, b = batch_length(examples, flex), len(examples)
    batch = {"input_ids": torch.full((b, n), pad, dtype=torch.long),
             "position_ids": torch.zeros((b, n), dtype=torch.long),
             "labels": torch.full((b, n), IGNORE, dtype=torch.long),
             "loss_kind": torch.zeros((b, n), dtype=torch.long),
             "loss_control": torch.zeros((b, n), dtype=torch.bool),
             "loss_t": torch.tensor([e.t for e in examples], dtype=torch.float),
             "loss_scale": torch.ones((b, n), dtype=torch.float),
             "loss_norm": torch.tensor([e.norm for e in examples], dtype=torch.float)}
    if any(e.plain_ids for e in examples):
        longest = max(len(e.plain_ids) for e in examples)
        batch["soft_ids"] = torch.full((b, longest), pad, dtype=torch.long)
        batch["soft_rows"] = torch.full((b, n), -1, dtype=torch.long)
        for i, e in enumerate(examples):
            batch["soft_ids"][i, :len(e.plain_ids)] = torch.tensor(e.plain_ids)
            batch["soft_rows"][i, :len(e.soft_rows)] = torch.tensor(e.soft_rows)
    for i, e in enumerate(examples):
        t = len(e.input_ids)
        batch["input_ids"][i, :t] = torch.tensor(e.input_ids)
        batch["position_ids"][i, :t] = torch.tensor(e.position_ids)
        batch["labels"][i, :t] = torch.tensor(e.labels)
        batch["loss_kind"][i, :t] = torch.tensor(e.kinds)
        batch["loss_control"][i, :t] = torch.tensor(e.control)
        batch["loss_scale"][i, :t] = torch.tensor(e.scale)

    return add_structure_masks(batch, examples, flex)


def soft_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor
                       ) -> torch.Tensor:
    """Per row, the cross-entropy of the student's distribution against the teacher's, over
    the tokens both know (the teacher's vocabulary may lack the student's control tokens)."""
    v = min(student_logits.shape[-1], teacher_logits.shape[-1])
    p = torch.softmax(teacher_logits[..., :v].float(), dim=-1)
    return -(p * torch.log_softmax(student_logits.float(), dim=-1)[..., :v]).sum(-1)


def pdiff_loss(logits: torch.Tensor, labels: torch.Tensor, kinds: torch.Tensor,
               t: torch.Tensor, norm: torch.Tensor, control: torch.Tensor | None = None,
               control_weight: float = 1.0, scale: torch.Tensor | None = None,
               soft: tuple[torch.Tensor, torch.Tensor] | None = None, soft_weight: float = 0.0
               ) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of the module docstring, and its two parts (per-token means, for the log).
    `logits[b, i]` scores `labels[b, i + 1]`; `control` marks AR labels that count
    `control_weight` times; `scale` multiplies each DIFFUSION label's 1/t (its chunk's count
    of blocks when blocks are drawn); `soft` = (bool [B, T - 1] where a DIFFUSION label has
    a soft target, the teacher's logits [that many, V']): those labels' cross-entropy
    becomes (1 - soft_weight) x CE + soft_weight x the CE against the teacher."""
    lg = logits[:, :-1].float()
    target = labels[:, 1:]
    kind = kinds[:, 1:]
    ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), target.reshape(-1), ignore_index=IGNORE,
                         reduction="none").view_as(target)
    if soft is not None and soft_weight > 0 and soft[0].any():
        where, teacher = soft
        mixed = (1 - soft_weight) * ce[where] + soft_weight * soft_cross_entropy(
            lg[where], teacher.to(lg.device))
        ce = ce.masked_scatter(where, mixed)
    ar_weight = (kind == AR).float()
    if control is not None and control_weight != 1.0:
        ar_weight = ar_weight * torch.where(control[:, 1:].to(ce.device), control_weight, 1.0)
    ar = (ce * ar_weight).sum(1)
    weight = (kind == DIFFUSION).float()
    if scale is not None:
        weight = weight * scale[:, 1:].to(ce.device)
    diffusion = (ce * weight).sum(1) / t.to(ce.device)
    per_sequence = (ar + diffusion) / norm.to(ce.device)
    plain = ce.detach()
    parts = {"ar_loss": float((plain * (kind == AR)).sum() / (kind == AR).sum().clamp(min=1)),
             "diffusion_loss": float((plain * (kind == DIFFUSION)).sum()
                                     / (kind == DIFFUSION).sum().clamp(min=1))}
    return per_sequence.mean(), parts


def chunk_slot_count(ids: list[int], vocab) -> list[int]:
    """Per row of `ids`, 1 where it is a chunk slot (what the two-copy layout copies)."""
    from solm.core.systems.pasta import MAIN, walk_training_order

    attrs, _ = walk_training_order(ids, vocab)
    return [int(a.thread != MAIN) for a in attrs]


def pdiff_trainer_class(base: type) -> type:
    """`base` (a transformers Trainer) computing `pdiff_loss`; it logs the AR loss and the
    masked tokens' loss beside the total."""

    class PdiffTrainer(base):
        control_weight = 1.0
        teacher = None  # --soft-target's model (frozen), or None
        soft_weight = 0.0

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # the loss is a mean per micro-batch: the Trainer divides by accumulation steps
            self.model_accepts_loss_kwargs = False
            self.loss_is_scaled_for_ga = False
            self._parts: dict[str, list[float]] = {}
            self._held_out: dict[str, list[float]] = {}  # part -> [loss sum, tokens]

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            inputs = dict(inputs)
            labels, kinds = inputs.pop("labels"), inputs.pop("loss_kind")
            t, norm = inputs.pop("loss_t"), inputs.pop("loss_norm")
            control, scale = inputs.pop("loss_control"), inputs.pop("loss_scale", None)
            soft_ids, soft_rows = inputs.pop("soft_ids", None), inputs.pop("soft_rows", None)
            outputs = model(**inputs)
            weight = self.control_weight if model.training else 1.0
            soft = (self._soft_targets(soft_ids, soft_rows, kinds)
                    if soft_ids is not None and self.teacher is not None and model.training
                    else None)
            loss, parts = pdiff_loss(outputs.logits, labels, kinds, t, norm, control, weight,
                                     scale, soft, self.soft_weight)
            if model.training:
                for k, v in parts.items():
                    self._parts.setdefault(k, []).append(v)
            else:  # held out: token-weighted over the whole evaluation
                for k, kind in (("ar_loss", AR), ("diffusion_loss", DIFFUSION)):
                    n = int((kinds[:, 1:] == kind).sum())
                    acc = self._held_out.setdefault(k, [0.0, 0])
                    acc[0] += parts[k] * n
                    acc[1] += n
            return (loss, outputs) if return_outputs else loss

        @torch.no_grad()
        def _soft_targets(self, soft_ids: torch.Tensor, soft_rows: torch.Tensor,
                          kinds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """(where a DIFFUSION label has a soft target, the teacher's logits there): the
            teacher reads each answer in order and its rows predict the masked tokens."""
            teacher = self.teacher
            device = next(teacher.parameters()).device
            rows = soft_rows[:, 1:]
            where = (rows >= 0) & (kinds[:, 1:] == DIFFUSION)
            b, i = torch.nonzero(where, as_tuple=True)
            hidden = teacher.model(input_ids=soft_ids.to(device)).last_hidden_state
            picked = hidden[b.to(device), rows[where].to(device)]
            return where, teacher.get_output_embeddings()(picked)

        def log(self, logs: dict, *args, **kwargs):
            if "loss" in logs and self._parts:
                for k, values in self._parts.items():
                    logs[k] = round(sum(values) / len(values), 4)
                self._parts = {}
            if "eval_loss" in logs and self._held_out:
                for k, (total, n) in self._held_out.items():
                    logs[f"eval_{k}"] = round(total / max(n, 1), 4)
                self._held_out = {}
            super().log(logs, *args, **kwargs)

    PdiffTrainer.__name__ = f"Pdiff{base.__name__}"
    return PdiffTrainer


class PdiffSFTTrainer(SolmTrainer):
    control_tokens = "pdiff"
    config: PdiffSFTConfig

    def read_data(self) -> list[dict]:
        cfg = self.config
        rows = load_sft_rows(cfg.data, limit=cfg.limit)
        if not any(r["tagged"] for r in rows):
            # without a promise there is no chunk, so no diffusion loss: the model would
            # learn plain autoregression under another name
            looks_tip = any("<reg_" in r["text"] for r in rows)
            raise SolmError(f"{cfg.data}: no row holds a Pasta-Lang promise, so Planned "
                            f"Diffusion has no chunk to learn"
                            + (" (its rows carry TIP registers `<reg_i>`: this is a TIP "
                               "traces file)" if looks_tip else "")
                            + "; train on `pasta annotate` output")
        return rows

    def vocab_options(self) -> dict[str, Any]:
        return {"positions": self.config.positions, "block_size": self.config.block_size}

    def control_token_options(self) -> dict[str, Any]:
        return {"pad_cycle": self.config.pad_cycle}

    def extra_results(self, trainer) -> dict[str, Any]:
        """The held-out AR and diffusion (masked-token) losses of the last evaluation and
        the gap between them: how far the model's denoising lags its own AR prediction."""
        last = [e for e in trainer.state.log_history if "eval_diffusion_loss" in e]
        if not last:
            return {}
        ar, diffusion = last[-1]["eval_ar_loss"], last[-1]["eval_diffusion_loss"]
        return {"eval_ar_loss_after": ar, "eval_diffusion_loss_after": diffusion,
                "diffusion_gap_after": round(diffusion - ar, 4)}

    def data_collator(self, tokenizer, vocab) -> Callable:
        cfg = self.config
        return PdiffCollator(tokenizer, vocab, cfg.max_len, cfg.extra_pads, cfg.mask_eps,
                             cfg.seed, flex=self.attention() == "flex", mask_max=cfg.mask_max,
                             copy_layout=cfg.layout, soft_targets=bool(cfg.soft_target))

    def trainer_class(self) -> type:
        cls = pdiff_trainer_class(super().trainer_class())
        cls.control_weight = self.config.control_token_loss_weight
        if self.config.soft_target:
            from solm.core.models import load_model

            teacher, _ = load_model(self.config.soft_target, dtype="fp32", device="cpu")
            cls.teacher = teacher.eval().requires_grad_(False)
            cls.soft_weight = self.config.soft_target_weight
        return cls

    def check(self) -> None:
        super().check()
        cfg = self.config
        if cfg.mask_max <= cfg.mask_eps:
            raise SolmError(f"--mask-max {cfg.mask_max} must be above --mask-eps "
                            f"{cfg.mask_eps}: the masking rate is drawn between them")
        if cfg.soft_target and cfg.layout != "two-copy":
            raise SolmError("--soft-target needs --layout two-copy (its targets sit at the "
                            "noised copy's slots)")

    def loss_label(self) -> str:
        weight = self.config.control_token_loss_weight
        return "train loss" if weight == 1.0 else f"train loss (control tokens x{weight:g})"

    def extra_arguments(self) -> dict[str, Any]:
        # held-out rows need only the loss (no logits gathered); peft models hide the label
        return {"prediction_loss_only": True, "label_names": ["labels"]}

    def prepare_data(self, rows: list[dict], tokenizer, vocab) -> PreparedData:
        from solm.core.provenance import file_sha256

        cfg = self.config
        collator = self.data_collator(tokenizer, vocab)
        kept, too_long, too_big = [], 0, 0
        for r in rows:
            try:
                ids, _ = collator.layout(r, random.Random(0), most=True)
            except ValueError:  # a chunk beyond the largest promise
                too_big += 1
                continue
            if cfg.layout == "two-copy":  # every chunk slot once more, as its noised copy
                ids = ids + [0] * sum(chunk_slot_count(ids, vocab))
            if len(ids) > cfg.max_len:
                too_long += 1
                continue
            kept.append(r)
        if not kept:
            raise SolmError(f"{cfg.data}: no row fits --max-len {cfg.max_len} in the slot "
                            f"layout")
        split = split_rows(kept, cfg.eval_rows, cfg.seed)
        held = [{**r, "held_out": True} for r in split.eval]
        meta = {"path": str(cfg.data), "sha256": file_sha256(cfg.data), "rows": len(kept),
                "skipped_too_long": too_long, "skipped_chunk_too_long": too_big,
                "train_rows": len(split.train), "eval_rows": len(held),
                "tagged_train_rows": split.annotated, "extra_pads": cfg.extra_pads,
                "mask_eps": cfg.mask_eps, "mask_max": cfg.mask_max, "layout": cfg.layout,
                "block_size": cfg.block_size}
        return PreparedData(split.train, held, meta)
