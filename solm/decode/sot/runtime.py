"""Skeleton-of-Thought decoded by solm: the skeleton as an ordinary decode, then every point
as a thread of one KV pool (`solm.core.systems.sot`), one forward pass per step for all points.

A point ends at EOS, at a newline (SoT asks for one or two sentences per point, so a newline
means the model went on to other points), or at `max_point_tokens`. The answer joins the points
in skeleton order. Timings leave out steps that built a compiled graph, as the PASTA runtime's
do; `prefill_s` counts both stages' prompt reading.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch

from solm.core.model_features import past_the_window
from solm.core.chat import eos_ids, messages_ids, text_ids
from solm.core.sampling import Sampler, SamplingConfig, choose_tokens
from solm.core.systems.sot import ATTR_NAMES, SotTracker, sot_visible
from solm.decode.flags import MAX_NEW_TOKENS, POOL_FULL
from solm.decode.sot.config import SotConfig
from solm.decode.sot.prompts import (EXPAND_POINT, EXPAND_PRIMER, EXPAND_SHARED,
                                     SKELETON_PRIMER, format_skeleton, parse_skeleton,
                                     skeleton_prompt)
from solm.engines.torch.step import PoolStep

NO_SKELETON = "no_skeleton"  # no point could be read: the answer is the skeleton stage's text
SKELETON_CAP = "skeleton_cap"  # the skeleton stopped at its token cap, not at its end


@dataclass
class SotResult:
    text: str
    points: list[str]
    skeleton: str
    skeleton_tokens: int  # generated in stage 1
    point_tokens: list[int]  # generated per point in stage 2
    forward_passes: int  # decode steps of both stages (prefills excluded)
    prefill_s: float
    decode_s: float
    flags: list[str]
    compile_s: float = 0.0
    prefix_ids: list[int] = field(default_factory=list)  # stage 2's shared prefix
    point_prompts: list[list[int]] = field(default_factory=list)  # each point's own prompt
    point_ids: list[list[int]] = field(default_factory=list)  # each point's generated tokens
    point_logits: list[torch.Tensor] = field(default_factory=list)  # when recorded

    @property
    def wall_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def generated_tokens(self) -> int:
        """Tokens the model decoded in both stages (the answer re-uses the skeleton's point
        texts, so this is not the answer's length)."""
        return self.skeleton_tokens + sum(self.point_tokens)

    @property
    def critical_path(self) -> int:
        """Tokens decoded one after another: the skeleton, then the longest point."""
        return self.skeleton_tokens + max(self.point_tokens, default=0)


def shared_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Longest common token prefix, leaving every sequence at least one token of its own."""
    n = min(len(s) for s in sequences) - 1
    first = sequences[0]
    for i in range(max(n, 0)):
        if any(s[i] != first[i] for s in sequences[1:]):
            return i
    return max(n, 0)


class SotRuntime:
    def __init__(self, model, tokenizer, pool_size: int = 2048, compile: bool = False,
                 compile_backend: str = "inductor"):
        self.model, self.tokenizer = model, tokenizer
        self.forward = PoolStep(model, pool_size, sot_visible, ATTR_NAMES, compile=compile,
                                backend=compile_backend)
        self.eos = set(eos_ids(tokenizer))
        vocab = model.get_output_embeddings().weight.shape[0]
        self.banned = torch.zeros(vocab, dtype=torch.bool)
        for tok in tokenizer.all_special_ids:  # control tokens and the like, EOS allowed
            if tok < vocab and tok not in self.eos:
                self.banned[tok] = True
        self.newline_ids = {i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])}

    # ---- stages -----------------------------------------------------------------------

    def _compile_clock(self) -> float:
        return self.forward.compile_s

    def skeleton(self, question: str, config: SotConfig, sampler: Sampler,
                 clock: dict, flags: set[str] | None = None) -> tuple[str, int, int]:
        """Stage 1: (skeleton text with its primer, tokens generated, decode steps); a
        skeleton cut by its cap adds SKELETON_CAP to `flags`."""
        prompt = messages_ids(self.tokenizer, [{"role": "user",
                                                "content": skeleton_prompt(question)}])
        prompt += text_ids(self.tokenizer, SKELETON_PRIMER)
        tracker, fwd = SotTracker(), self.forward
        fwd.reset()
        if not fwd.fits(len(prompt) + 1):
            raise ValueError(f"skeleton prompt of {len(prompt)} tokens does not fit the pool")
        # both stages' tokens (the pool bounds them when no cap is set)
        beyond = past_the_window(self.model.config,
                                 len(prompt) + (config.max_new_tokens or fwd.capacity))
        if beyond:
            raise ValueError(beyond)
        t0, c0 = time.perf_counter(), self._compile_clock()
        logits = fwd(prompt, [tracker.prefix(t) for t in prompt], prefill=True)[-1]
        clock["prefill"] += time.perf_counter() - t0 - (self._compile_clock() - c0)
        t0, c0 = time.perf_counter(), self._compile_clock()
        out, steps = [], 0
        cap = min(config.max_skeleton_tokens, config.max_new_tokens or config.max_skeleton_tokens)
        tok = sampler(logits, self.banned, out)
        while tok not in self.eos and len(out) < cap and fwd.fits(1):
            out.append(tok)
            logits = fwd([tok], [tracker.prefix(tok)])[-1]
            steps += 1
            tok = sampler(logits, self.banned, out)
        clock["decode"] += time.perf_counter() - t0 - (self._compile_clock() - c0)
        text = SKELETON_PRIMER + self.tokenizer.decode(out, skip_special_tokens=True)
        if flags is not None and tok not in self.eos and len(out) >= cap:
            flags.add(SKELETON_CAP)
        return text, len(out), steps

    def point_prompts(self, question: str, points: list[str]) -> tuple[list[int], list[list[int]]]:
        """The shared prefix and each point's own tokens (its instruction line, the end of the
        user turn, and the primer `i. point`), split at their longest common token prefix, so
        each point reads exactly the tokens it would read alone."""
        shared = EXPAND_SHARED.format(question=question.strip(),
                                      skeleton=format_skeleton(points))
        full = []
        for i, point in enumerate(points, start=1):
            ids = messages_ids(self.tokenizer, [{"role": "user",
                                                 "content": shared + EXPAND_POINT.format(index=i)}])
            full.append(ids + text_ids(self.tokenizer, EXPAND_PRIMER.format(index=i, point=point)))
        cut = shared_prefix_length(full)
        return full[0][:cut], [ids[cut:] for ids in full]

    def expand(self, prefix: list[int], own: list[list[int]], config: SotConfig,
               samplers: list[Sampler], clock: dict, flags: set[str],
               budget: int | None = None) -> tuple[list[list[int]], int, list[torch.Tensor]]:
        """Stage 2: every point decoded as a thread after the shared prefix; at most `budget`
        tokens over all points (the points first in the skeleton keep theirs)."""
        tracker, fwd = SotTracker(), self.forward
        fwd.reset()
        need = len(prefix) + sum(len(o) for o in own)
        if not fwd.fits(need + len(own)):
            raise ValueError(f"expansion prompts of {need} tokens do not fit the pool")
        t0, c0 = time.perf_counter(), self._compile_clock()
        fwd(prefix, [tracker.prefix(t) for t in prefix], prefill=True)
        tokens = [t for o in own for t in o]
        attrs = [tracker.point(i, t) for i, o in enumerate(own, start=1) for t in o]
        logits = fwd(tokens, attrs, prefill=True)
        ends = torch.tensor([len(o) for o in own]).cumsum(0) - 1
        last = logits[ends]
        clock["prefill"] += time.perf_counter() - t0 - (self._compile_clock() - c0)
        t0, c0 = time.perf_counter(), self._compile_clock()
        n = len(own)
        generated: list[list[int]] = [[] for _ in range(n)]
        recorded: list[list[torch.Tensor]] = [[] for _ in range(n)]
        stops = self.eos | (self.newline_ids if config.stop_at_newline else set())
        pending: dict[int, int] = {}
        if config.record_logits:
            for i in range(n):
                recorded[i].append(last[i])
        first, _ = choose_tokens(last, [samplers[i].draw(self.banned, index=0)
                                        for i in range(n)])
        pending = {i: tok for i, tok in enumerate(first) if tok not in stops}
        steps = 0
        while pending:
            active = sorted(pending)
            if budget is not None:
                left = budget - sum(len(g) for g in generated)
                if left < len(active):
                    flags.add(MAX_NEW_TOKENS)
                    for i in active[max(left, 0):]:
                        del pending[i]
                    active = active[:max(left, 0)]
                    if not active:
                        break
            if not fwd.fits(len(active)):
                flags.add(POOL_FULL)
                break
            batch = [pending[i] for i in active]
            for i in active:
                generated[i].append(pending[i])
            logits = fwd(batch, [tracker.point(i + 1, t) for i, t in zip(active, batch)])
            steps += 1
            asks = []
            for row, i in enumerate(active):
                del pending[i]
                if len(generated[i]) >= config.max_point_tokens:
                    flags.add(MAX_NEW_TOKENS)
                    continue
                if config.record_logits:
                    recorded[i].append(logits[row])
                asks.append((row, i))
            if not asks:
                continue
            # every point's next token in one draw: one copy to the host per pass
            chosen, _ = choose_tokens(
                logits[torch.tensor([row for row, _ in asks])],
                [samplers[i].draw(self.banned, generated[i], index=len(generated[i]))
                 for _, i in asks])
            for (_, i), tok in zip(asks, chosen):
                if tok not in stops:
                    pending[i] = tok
        clock["decode"] += time.perf_counter() - t0 - (self._compile_clock() - c0)
        stacked = [torch.stack(r) for r in recorded] if config.record_logits else []
        return generated, steps, stacked

    # ---- the whole method ---------------------------------------------------------------

    @torch.no_grad()
    def generate(self, question: str, config: SotConfig | None = None) -> SotResult:
        config = config or SotConfig()
        clock = {"prefill": 0.0, "decode": 0.0}
        c_start = self._compile_clock()
        flags: set[str] = set()
        sampler = Sampler(config.sampling, exempt=sorted(self.eos))
        skeleton, skeleton_tokens, steps = self.skeleton(question, config, sampler, clock,
                                                         flags)
        points = parse_skeleton(skeleton)
        if not points:
            flags.add(NO_SKELETON)
            return SotResult(skeleton, [], skeleton, skeleton_tokens, [], steps,
                             clock["prefill"], clock["decode"], sorted(flags),
                             self._compile_clock() - c_start)
        prefix, own = self.point_prompts(question, points)
        samplers = [Sampler(SamplingConfig(**{**config.sampling.__dict__,
                                              "seed": config.sampling.seed + i}),
                            exempt=sorted(self.eos)) for i in range(1, len(points) + 1)]
        budget = None if config.max_new_tokens is None \
            else config.max_new_tokens - skeleton_tokens
        generated, point_steps, logits = self.expand(prefix, own, config, samplers, clock, flags,
                                                     budget)
        lines = []
        for i, (point, ids) in enumerate(zip(points, generated), start=1):
            body = self.tokenizer.decode(ids, skip_special_tokens=True)
            lines.append(EXPAND_PRIMER.format(index=i, point=point) + body)
        return SotResult("\n".join(lines), points, skeleton, skeleton_tokens,
                         [len(g) for g in generated], steps + point_steps, clock["prefill"],
                         clock["decode"], sorted(flags), self._compile_clock() - c_start,
                         prefix, own, generated, logits)
