"""The llama.cpp engine: the model exported to a GGUF (solm's cache) and decoded through
llama-cpp-python (`solm.llamacpp`)."""

from __future__ import annotations

import time
from typing import Sequence

from solm.engines.base import Engine


class LlamaCppEngine(Engine):
    name = "llama.cpp"
    summary = "the model exported to a GGUF, decoded by llama-cpp-python: faster on a CPU"
    format_option = "gguf_types"  # the `solm bench step` option naming its formats
    exact_format = "f32"  # its logits equal the Hugging Face forward's (fp32)

    def unavailable(self) -> str | None:
        from solm.llamacpp.binding import INSTALL_HINT, llama_cpp_available

        if llama_cpp_available():
            return None
        return f"llama-cpp-python is not installed ({INSTALL_HINT})"

    def probes(self, model: str, formats: Sequence[str]) -> list:
        from solm.llamacpp.engine import gguf_for

        return [LlamaCppProbe(gguf_for(model, f), f) for f in formats]


class LlamaCppProbe:
    """llama.cpp (`LlamaContext`, one unified cache): k tokens in one `llama_decode` call,
    each in its own sequence; the k new cells are removed after every pass."""

    engine = "llama.cpp"

    def __init__(self, gguf, variant: str, threads: int | None = None):
        from pathlib import Path

        self.gguf, self.variant, self.threads = str(gguf), variant, threads
        self.weight_bytes = Path(gguf).stat().st_size
        self.ctx = None

    def prepare(self, k_max: int, context: int) -> None:
        from solm.engines.probe import context_ids
        from solm.llamacpp.binding import LlamaContext, Token

        self.context = context
        self.ctx = LlamaContext(self.gguf, n_ctx=k_max * (context + 1) + 16, n_seq=k_max,
                                threads=self.threads)
        for s in range(k_max):
            ids = context_ids(s, context)
            self.ctx.decode([Token(t, p, s, logits=p == context - 1) for p, t in enumerate(ids)])

    def one_pass(self, k: int) -> float:
        from solm.engines.probe import FIRST_ID
        from solm.llamacpp.binding import Token

        c = self.context
        t0 = time.perf_counter()
        self.logits = self.ctx.decode([Token(FIRST_ID + s, c, s) for s in range(k)])
        seconds = time.perf_counter() - t0
        for s in range(k):
            self.ctx.seq_rm(s, c, -1)
        return seconds

    def close(self) -> None:
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None
