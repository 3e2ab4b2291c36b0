"""`PoolStep`'s call (one request at a time, as `PastaRuntime` decodes) on any engine step
with `SlotStep`'s call (llama.cpp's, onnxruntime's): the request's tokens take the next
slots of a pool, and it reads every slot written so far under its structure."""

from __future__ import annotations

from typing import Any, Sequence

from solm.core.systems.pasta import ATTR_NAMES


class OneRequestPool:
    compile_s = 0.0  # nothing is compiled at run time

    def __init__(self, inner: Any, pool_size: int):
        self.inner = inner
        self.join_before_sync = inner.join_before_sync
        self.pool_size, self.used = pool_size, 0

    def reset(self) -> None:
        if self.used:
            self.inner.release(0, self.used)
        self.used = 0

    def fits(self, n: int) -> bool:
        return self.used + n <= self.pool_size

    def compile_buckets(self, max_fed: int, max_slots: int) -> int:
        return 0

    def __call__(self, tokens: Sequence[int], attrs: Sequence, prefill: bool = False):
        n, first = len(tokens), self.used
        self.used += n
        columns = {name: [int(getattr(a, name)) for a in attrs] for name in ATTR_NAMES}
        columns.update(request=[1] * n, group=[-1] * n, shared=[0] * n)
        return self.inner(tokens, [a.pos for a in attrs], columns, range(first, first + n),
                          [(n, [(0, self.used)])], prefill)
