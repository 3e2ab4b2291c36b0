"""One forward pass over a shared KV pool, masked by a structure's visibility term.

The step every pool-based decoder shares (PASTA's threads today; Skeleton-of-Thought points
and diffusion chunks are the same thing with other attributes or terms): the tokens fed
this step are written at the next free slots of one pre-allocated pool (in decode order,
whatever thread they belong to), and each attends to the slots written so far under
`pairwise(visible, fed, written)`, where `visible` is a mask term of the system's structure
module. Positions come with the tokens. Returns one logits row per fed token.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from solm.core.structure import MaskTerm, pairwise
from solm.engines.torch.attention import attention_implementation
from solm.engines.torch.compiled import (KV_BLOCK, TOKEN_BUCKET_MAX, CompiledForward, bucket,
                                  kv_bucket, padded_step_inputs, pool_body, token_buckets_up_to)
from solm.engines.torch.head import OutputHead
from solm.engines.torch.pool import PoolCache, kv_shape_of, num_layers_of


def activation_dtype(model) -> torch.dtype:
    """The dtype hidden states (and so keys and values) have: the model's float dtype."""
    return next(p.dtype for p in model.parameters() if p.dtype.is_floating_point)


def setup_pool(step: Any, model, pool_size: int, visible: MaskTerm, capacity: int) -> None:
    """What every pooled step holds: the model, its device, the pool (`capacity` slots, room
    for padded compiled steps included), the visibility rule and the output head."""
    step.model = model
    step.device = next(model.parameters()).device
    step.pool_size = pool_size
    step.visible = visible
    step.capacity = capacity
    step.cache = PoolCache(num_layers_of(model), capacity)
    step.head = OutputHead(model)
    step.compiled = None


class PoolStep:
    """`step(tokens, attrs)`: feed tokens whose attributes (objects with the term's attribute
    names and `pos`) come from the system's tracker; `reset()` empties the pool.

    `compile`: steps of up to `TOKEN_BUCKET_MAX` tokens run as graphs compiled per bucket
    (`solm.engines.torch.compiled`); the pool gets room for a padded step past `pool_size`."""

    def __init__(self, model, pool_size: int, visible: MaskTerm, attr_names: Sequence[str],
                 compile: bool = False, backend: str = "inductor"):
        setup_pool(self, model, pool_size, visible,
                   pool_size + TOKEN_BUCKET_MAX if compile else pool_size)
        if compile:
            self.cache.allocate(*kv_shape_of(model), dtype=activation_dtype(model),
                                device=self.device)
            self.compiled = CompiledForward(pool_body(model, self.cache, self.head), backend,
                                            cudagraphs=self.device.type == "cuda")
        self._slots = {n: torch.empty(pool_size, dtype=torch.long) for n in attr_names}
        self.used = 0

    @property
    def compile_s(self) -> float:
        """Time spent in steps that built a graph (runtimes leave it out of their timings)."""
        return self.compiled.build_s if self.compiled is not None else 0.0

    def reset(self) -> None:
        self.used = 0

    @torch.no_grad()
    def compile_buckets(self, max_fed: int, max_slots: int) -> int:
        """Build, now, every graph a decode feeding up to `max_fed` tokens per step into up
        to `max_slots` slots will use (so no timed step compiles); returns the graph count.
        Writes scratch values into the pool: call between decodes."""
        if self.compiled is None:
            return 0
        fed = bucket(min(max_fed, TOKEN_BUCKET_MAX), TOKEN_BUCKET_MAX)
        last_kv = kv_bucket(min(max_slots, self.capacity), KV_BLOCK, self.capacity)
        sizes, k = [], KV_BLOCK
        while k < last_kv:
            sizes.append(k)
            k *= 2
        sizes.append(last_kv)
        with attention_implementation(self.model):
            for b in token_buckets_up_to(fed):
                for k in sizes:
                    first = min(k - b, self.pool_size - b)
                    self.compiled(*padded_step_inputs(
                        [0] * b, [first] * b, torch.ones(b, first + b, dtype=torch.bool),
                        first, TOKEN_BUCKET_MAX, k, self.capacity, self.device))
        self.reset()
        return self.compiled.compiles

    def fits(self, n: int) -> bool:
        return self.used + n <= self.pool_size

    @torch.no_grad()
    def __call__(self, tokens: Sequence[int], attrs: Sequence[Any], prefill: bool = False
                 ) -> torch.Tensor:
        """Logits of every fed token. `prefill` runs eagerly (a prompt's length is its own
        shape, seen once per decode: not worth a graph)."""
        n, first = len(tokens), self.used
        s = self._slots
        for name in s:
            s[name][first:first + n] = torch.tensor([getattr(a, name) for a in attrs])
        self.used += n
        q = {name: s[name][first:self.used] for name in s}
        k = {name: s[name][:self.used] for name in s}
        visible = pairwise(self.visible, q, k)
        if self.compiled is not None and not prefill and n <= TOKEN_BUCKET_MAX:
            args = padded_step_inputs(list(tokens), [a.pos for a in attrs], visible, first,
                                      TOKEN_BUCKET_MAX, KV_BLOCK, self.capacity, self.device)
            with attention_implementation(self.model):
                return self.compiled(*args)[:n]
        visible = visible.to(self.device)
        self.cache.set_step(first, n, device=self.device)
        inputs = dict(input_ids=torch.tensor([list(tokens)], device=self.device),
                      position_ids=torch.tensor([[a.pos for a in attrs]], device=self.device),
                      attention_mask=visible[None, None], cache=self.cache, use_cache=True)
        with attention_implementation(self.model):
            return self.head.model_logits(inputs, lambda rows: rows[0])
