"""llama.cpp's own generation loop, the yardstick for solm's llama.cpp engine: decode one
token with `llama_decode`, take the argmax of its logits where llama.cpp wrote them (numpy
over the C array, no copy), repeat. Nothing of solm runs between the steps.

Not llama.cpp's greedy sampler (`llama_sampler_sample`): it builds a candidate array of the
whole vocabulary on every call, and measured 10.9 ms a token against 5.3 ms for this loop
(AMD EPYC, 2 cores, the demo's q4_0 GGUF, 286 tokens), slower than llama-cpp-python's own
`Llama.eval` loop (6.1-6.8 ms), which no llama.cpp user would call the fastest."""

from __future__ import annotations

import time

import numpy as np

from solm.engines.llamacpp.binding import LlamaContext, Token
from solm.engines.llamacpp.compute_thread import on_llama_thread


class OwnLoop:
    """Greedy generation on sequence 0 of `ctx` (one sequence is enough)."""

    def __init__(self, ctx: LlamaContext):
        import llama_cpp as L

        self.L, self.ctx = L, ctx
        self.batch = L.llama_batch_init(1, 0, 1)

    def generate(self, ids: list[int], n_tokens: int) -> tuple[list[int], float, float]:
        """(the n_tokens generated, prefill seconds, decode seconds) from the prompt `ids`,
        decoded on llama.cpp's own thread (`solm.engines.llamacpp.compute_thread`)."""
        return on_llama_thread(self._generate, ids, n_tokens)

    def _argmax(self) -> int:
        logits = self.L.llama_get_logits_ith(self.ctx.ctx, -1)
        return int(np.ctypeslib.as_array(logits, shape=(self.ctx.n_vocab,)).argmax())

    def _generate(self, ids: list[int], n_tokens: int) -> tuple[list[int], float, float]:
        L, batch = self.L, self.batch
        self.ctx.clear()
        t0 = time.perf_counter()
        self.ctx.decode([Token(t, p, 0, logits=p == len(ids) - 1) for p, t in enumerate(ids)])
        t1 = time.perf_counter()
        out = [self._argmax()]
        for step in range(n_tokens - 1):
            batch.n_tokens = 1
            batch.token[0], batch.pos[0], batch.n_seq_id[0] = out[-1], len(ids) + step, 1
            batch.seq_id[0][0], batch.logits[0] = 0, 1
            if L.llama_decode(self.ctx.ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
            out.append(self._argmax())
        return out, t1 - t0, time.perf_counter() - t1

    def close(self) -> None:
        if self.batch is not None:
            self.L.llama_batch_free(self.batch)
            self.batch = None
