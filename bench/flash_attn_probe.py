"""llama.cpp's flash attention on and off, side by side in one run: the median ms of a pass of
k tokens in k sequences after `context` tokens each (the `solm bench step` protocol).

    python bench/flash_attn_probe.py OUT.json [CONTEXT] [FORMATS]

Run on a quiet machine; the CPU goes in the output."""

from __future__ import annotations

import json
import statistics
import sys
import time

from solm.engines.bandwidth import cpu_description
from solm.engines.probe import FIRST_ID, context_ids
from solm.engines.llamacpp.binding import LlamaContext, Token
from solm.engines.llamacpp.model import gguf_for

SEQS, KS, REPEATS = 8, (1, 2, 4, 8), 25


def main(out: str, context: int = 64, formats: str = "q8_0,q4_0") -> None:
    result = {"cpu": cpu_description(), "context": context, "sequences": SEQS,
              "repeats": REPEATS, "ms": {}}
    for fmt in formats.split(","):
        path = str(gguf_for("smollm2-135m", fmt))
        for flash in (False, True):
            ctx = LlamaContext(path, n_ctx=SEQS * (context + 1) + 16, n_seq=SEQS,
                               flash_attn=flash)
            for s in range(SEQS):
                ids = context_ids(s, context)
                for p0 in range(0, context, 256):
                    ctx.decode([Token(t, p0 + p, s, logits=p0 + p == context - 1)
                                for p, t in enumerate(ids[p0:p0 + 256])])
            row = {}
            for k in KS:
                times = []
                for _ in range(REPEATS + 1):
                    t0 = time.perf_counter()
                    ctx.decode([Token(FIRST_ID + s, context, s) for s in range(k)])
                    times.append(time.perf_counter() - t0)
                    for s in range(k):
                        ctx.seq_rm(s, context, -1)
                row[k] = round(1000 * statistics.median(times[1:]), 2)
            ctx.close()
            result["ms"][f"{fmt} flash_attn={'on' if flash else 'off'}"] = row
            print(fmt, "flash", flash, row, flush=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) if i == 0 else a for i, a in enumerate(sys.argv[2:])))
