"""llama.cpp's own generation loop, the yardstick for solm's llama.cpp engine: decode one
token with `llama_decode`, pick it with llama.cpp's greedy sampler in C, repeat. Nothing of
solm runs between the steps."""

from __future__ import annotations

import time

from solm.engines.llamacpp.binding import LlamaContext, Token
from solm.engines.llamacpp.compute_thread import on_llama_thread


class OwnLoop:
    """Greedy generation on sequence 0 of `ctx` (one sequence is enough)."""

    def __init__(self, ctx: LlamaContext):
        import llama_cpp as L

        self.L, self.ctx = L, ctx
        self.chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(self.chain, L.llama_sampler_init_greedy())
        self.batch = L.llama_batch_init(1, 0, 1)

    def generate(self, ids: list[int], n_tokens: int) -> tuple[list[int], float, float]:
        """(the n_tokens generated, prefill seconds, decode seconds) from the prompt `ids`,
        decoded on llama.cpp's own thread (`solm.engines.llamacpp.compute_thread`)."""
        return on_llama_thread(self._generate, ids, n_tokens)

    def _generate(self, ids: list[int], n_tokens: int) -> tuple[list[int], float, float]:
        L, batch = self.L, self.batch
        self.ctx.clear()
        t0 = time.perf_counter()
        self.ctx.decode([Token(t, p, 0, logits=p == len(ids) - 1) for p, t in enumerate(ids)])
        t1 = time.perf_counter()
        out = [L.llama_sampler_sample(self.chain, self.ctx.ctx, -1)]
        for step in range(n_tokens - 1):
            batch.n_tokens = 1
            batch.token[0], batch.pos[0], batch.n_seq_id[0] = out[-1], len(ids) + step, 1
            batch.seq_id[0][0], batch.logits[0] = 0, 1
            if L.llama_decode(self.ctx.ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
            out.append(L.llama_sampler_sample(self.chain, self.ctx.ctx, -1))
        return out, t1 - t0, time.perf_counter() - t1

    def close(self) -> None:
        if self.chain is not None:
            self.L.llama_batch_free(self.batch)
            self.L.llama_sampler_free(self.chain)
            self.chain = None
