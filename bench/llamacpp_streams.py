"""Independent decodes on llama.cpp: one unified KV cache against a stream per sequence.

B sequences each prefilled with P tokens, then N steps feeding one token to every sequence
in one `llama_decode`; the same with one sequence alone. Prints ms a step and tokens a second
for each layout (run it on a quiet CPU: `python bench/llamacpp_streams.py GGUF`).
"""

from __future__ import annotations

import argparse
import time

from solm.llamacpp.binding import LlamaContext, Token


def step_ms(gguf: str, batch: int, prompt: int, steps: int, unified: bool,
            cells_each: int) -> float:
    with LlamaContext(gguf, n_ctx=batch * cells_each, n_seq=batch, unified=unified) as ctx:
        for s in range(batch):
            ctx.decode([Token(100 + i % 50, i, s, logits=i == prompt - 1)
                        for i in range(prompt)])
        started = time.perf_counter()
        for k in range(steps):
            ctx.decode([Token(200, prompt + k, s) for s in range(batch)])
        return (time.perf_counter() - started) / steps * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("gguf")
    p.add_argument("--batches", default="1,2,4,8,16,32")
    p.add_argument("--prompt", type=int, default=300)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--cells-each", type=int, default=512)
    a = p.parse_args()
    print("layout      batch  ms/step  tokens/s")
    for unified in (True, False):
        for b in map(int, a.batches.split(",")):
            ms = step_ms(a.gguf, b, a.prompt, a.steps, unified, a.cells_each)
            print(f"{'unified' if unified else 'streams':10s} {b:6d} {ms:8.1f} {b / ms * 1000:9.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
