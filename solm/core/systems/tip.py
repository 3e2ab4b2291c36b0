"""TIP (Thinking in Place): which reasoning steps are alive, as one pure function.

A response is split into steps: each `<reg_i>` token opens a new step that holds register i
(tokens before the first register form step 0, which never dies, like the prompt). When
register i is opened again, the step that held it dies *at that token*: the new `<reg_i>` and
every later token no longer see it. One exception: a step killed by the register right after
it (the newest step, its register reopened at once) dies one token later, so the reopening
`<reg_i>` still sees it. Killed at once, it would leave that register's position after a gap
in what stays visible, which an engine whose sequences must continue at their last visible
position + 1 (llama.cpp) cannot express; deferred, every token's position follows the
largest visible one on every engine alike. Positions are the plain token positions (eviction
changes only which keys attention reads), and targets are the next token.

`TipTracker` is fed tokens in order and reports each token's step and the steps it kills; the
runtime uses it to free pages, and `structure` uses it to build training masks, so both see
exactly the same rule. Visibility is two mask terms over token attributes (`index`: the
token's place in the sequence, `death`: the index of the token that kills its step):
`and_masks(causal, step_alive)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from solm.core.control_tokens import register_token
from solm.core.structure import IGNORE, Attrs, Structure, and_masks

NAME = "tip"
PROMPT_STEP = -1  # prompt tokens: always visible


@dataclass(frozen=True)
class TipVocab:
    registers: dict[int, int]  # token id -> register index

    @classmethod
    def from_tokenizer(cls, tokenizer, num_registers: int = 16) -> "TipVocab":
        vocab = tokenizer.get_vocab()
        names = [register_token(i) for i in range(num_registers)]
        missing = [n for n in names if n not in vocab]
        if missing:
            raise ValueError(f"tokenizer lacks TIP register tokens ({missing[0]} ...); call "
                             f"add_control_tokens(model, tokenizer, 'tip', num_registers="
                             f"{num_registers}) first")
        return cls({vocab[n]: i for i, n in enumerate(names)})

    @property
    def num_registers(self) -> int:
        return len(self.registers)

    @property
    def control_ids(self) -> list[int]:
        return list(self.registers)


Vocab = TipVocab  # the name every structure module exports


@dataclass
class TipTracker:
    """Feed response tokens one at a time; know which step each belongs to and which die."""

    vocab: TipVocab
    step: int = 0  # current step id (0 = before the first register)
    holder: dict[int, int] = field(default_factory=dict)  # register -> step holding it
    dead: set[int] = field(default_factory=set)
    deferred: int | None = None  # the newest step, killed by the token just fed: dies next

    def feed(self, token: int) -> tuple[int, list[int]]:
        """Return (step of this token, the steps that die at this token)."""
        died = []
        if self.deferred is not None:
            died.append(self.deferred)
            self.deferred = None
        reg = self.vocab.registers.get(int(token))
        if reg is not None:
            killed = self.holder.get(reg)
            newest = killed == self.step
            self.step += 1
            self.holder[reg] = self.step
            if killed is not None and newest:
                self.deferred = killed
            elif killed is not None:
                died.append(killed)
        self.dead.update(died)
        return self.step, died

    def is_live(self, step: int) -> bool:
        return step not in self.dead


def tip_steps(response_ids: Sequence[int], vocab: TipVocab) -> tuple[list[int], list[int]]:
    """Per response token: its step, and the index of the token that kills that step
    (len(response_ids) when it survives to the end)."""
    tracker = TipTracker(vocab)
    steps: list[int] = []
    death: dict[int, int] = {}
    for i, tok in enumerate(response_ids):
        s, killed = tracker.feed(tok)
        steps.append(s)
        for step in killed:
            death[step] = i
    end = len(response_ids)
    return steps, [death.get(s, end) for s in steps]


def causal(q: Attrs, k: Attrs) -> torch.Tensor:
    """Keys at or before the query."""
    return k["index"] <= q["index"]


def step_alive(q: Attrs, k: Attrs) -> torch.Tensor:
    """Keys whose step is still alive at the query: not killed at or before it."""
    return k["death"] > q["index"]


tip_visible = and_masks(causal, step_alive)


def structure(token_ids: Sequence[int] | torch.Tensor, vocab: TipVocab,
              prompt_len: int = 0) -> Structure:
    """Mask, positions and targets of prompt + TIP response: token i sees token j <= i unless
    j's step died at or before i (a newest step killed by the register after it dies one
    token later: the module's docstring). Registers inside the prompt are ordinary prompt tokens.

    `attrs`: `index`, `step` (PROMPT_STEP for the prompt) and `death` (index of the token that
    kills this token's step; T + 1 when it never dies)."""
    if isinstance(token_ids, torch.Tensor):
        token_ids = token_ids.tolist()
    t = len(token_ids)
    steps, death = tip_steps(token_ids[prompt_len:], vocab)
    death_at = torch.full((t,), t + 1, dtype=torch.long)  # prompt tokens never die
    step = torch.full((t,), PROMPT_STEP, dtype=torch.long)
    if steps:
        death_at[prompt_len:] = torch.tensor(death, dtype=torch.long) + prompt_len
        death_at[death_at >= t] = t + 1
        step[prompt_len:] = torch.tensor(steps, dtype=torch.long)
    idx = torch.arange(t)
    attrs = {"index": idx, "step": step, "death": death_at}
    targets = torch.full((t,), IGNORE, dtype=torch.long)
    if t > 1:
        targets[:-1] = torch.tensor(token_ids[1:], dtype=torch.long)
    return Structure(term=tip_visible, position_ids=idx.clone(),
                     targets=targets, attrs=attrs)


def steps_and_kills(ids: list[int], vocab) -> tuple[int, int]:
    """Registers opened and steps killed by a reuse, in a generated sequence."""
    if vocab is None:
        return 0, 0
    tracker = TipTracker(vocab)
    opened = killed = 0
    for t in ids:
        _, dead = tracker.feed(t)
        opened += int(t) in vocab.registers
        killed += len(dead)
    return opened, killed
