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
from solm.decode.attention import attention_implementation
from solm.decode.head import OutputHead
from solm.decode.pool import PoolCache, num_layers_of


class PoolStep:
    """`step(tokens, attrs)`: feed tokens whose attributes (objects with the term's attribute
    names and `pos`) come from the system's tracker; `reset()` empties the pool."""

    def __init__(self, model, pool_size: int, visible: MaskTerm, attr_names: Sequence[str]):
        self.model = model
        self.device = next(model.parameters()).device
        self.pool_size = pool_size
        self.visible = visible
        self.cache = PoolCache(num_layers_of(model), pool_size)
        self.head = OutputHead(model)
        self._slots = {n: torch.empty(pool_size, dtype=torch.long) for n in attr_names}
        self.used = 0

    def reset(self) -> None:
        self.used = 0

    def fits(self, n: int) -> bool:
        return self.used + n <= self.pool_size

    @torch.no_grad()
    def __call__(self, tokens: Sequence[int], attrs: Sequence[Any]) -> torch.Tensor:
        n, first = len(tokens), self.used
        s = self._slots
        for name in s:
            s[name][first:first + n] = torch.tensor([getattr(a, name) for a in attrs])
        self.used += n
        q = {name: s[name][first:self.used] for name in s}
        k = {name: s[name][:self.used] for name in s}
        visible = pairwise(self.visible, q, k).to(self.device)
        self.cache.set_step(first, n, device=self.device)
        inputs = dict(input_ids=torch.tensor([list(tokens)], device=self.device),
                      position_ids=torch.tensor([[a.pos for a in attrs]], device=self.device),
                      attention_mask=visible[None, None], cache=self.cache, use_cache=True)
        with attention_implementation(self.model):
            return self.head.model_logits(inputs, lambda rows: rows[0])
