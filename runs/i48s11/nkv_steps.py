"""Issue 48, eleventh session: a one-token llama.cpp pass against the cells its sequence
holds, around 256 and 512 (where llama.cpp pads the cells a pass reads), a decode-shaped
context (1024 cells, 256 sequences, unified, flash as measured here), q4_0; median of R
passes, every context interleaved. Quiet CPU."""
import json, statistics, sys, time
from solm.llamacpp.binding import LlamaContext, Token
from solm.llamacpp.engine import gguf_for
from solm.engines.probe import context_ids, FIRST_ID
from solm.engines.cost import flash_attn_here
from solm.decode.bandwidth import cpu_description

OUT, R = sys.argv[1], int(sys.argv[2])
gguf = gguf_for("baseline-sft-cpu", "q4_0")
PS = (16, 100, 200, 254, 255, 256, 257, 300, 400, 510, 511, 512, 600, 700)
ctxs = {}
for P in PS:
    ctx = LlamaContext(gguf, n_ctx=1024, n_seq=256, flash_attn=flash_attn_here())
    ids = context_ids(0, P)
    ctx.decode([Token(t, p, 0, logits=p == P - 1) for p, t in enumerate(ids)])
    ctxs[P] = ctx
t = {P: [] for P in PS}
for r in range(R):
    for P, ctx in ctxs.items():
        t0 = time.perf_counter()
        ctx.decode([Token(FIRST_ID, P, 0)])
        t[P].append(time.perf_counter() - t0)
        ctx.seq_rm(0, P, -1)
ms = {P: statistics.median(v) * 1e3 for P, v in t.items()}
for P, m in ms.items():
    print(f"{P + 1:4d} cells after the pass: {m:5.2f} ms")
json.dump({"cpu": cpu_description(), "flash": flash_attn_here(), "repeats": R,
           "date": time.strftime("%Y-%m-%d %H:%M"),
           "ms_by_cells_after": {P + 1: m for P, m in ms.items()}}, open(OUT, "w"), indent=1)
