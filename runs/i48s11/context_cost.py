"""Issue 48, eleventh session: a k-token pass's cost against the context it reads, flash
attention on and off: a decode-shaped llama.cpp context (1024 cells, 256 sequences, unified),
a shared prompt of P tokens forked to k sequences by seq_cp, one token each at position P;
median of R passes, every variant interleaved. Run on a quiet CPU."""
import json, statistics, sys, time
from solm.llamacpp.binding import LlamaContext, Token
from solm.llamacpp.engine import gguf_for
from solm.engines.probe import context_ids, FIRST_ID
from solm.decode.bandwidth import cpu_description

OUT, R = sys.argv[1], int(sys.argv[2])
model = sys.argv[3] if len(sys.argv) > 3 else "baseline-sft-cpu"
gguf = gguf_for(model, "q4_0")
KS, PS = (1, 2, 3, 4), (16, 64, 128, 256, 400)
variants = {}
for flash in (True, False):
    for P in PS:
        ctx = LlamaContext(gguf, n_ctx=1024, n_seq=256, flash_attn=flash)
        ids = context_ids(0, P)
        ctx.decode([Token(t, p, 0, logits=p == P - 1) for p, t in enumerate(ids)])
        for s in range(1, max(KS)):
            ctx.seq_cp(0, s)
        variants[(flash, P)] = ctx
times = {key: {k: [] for k in KS} for key in variants}
for r in range(R):
    for (flash, P), ctx in variants.items():
        for k in KS:
            t0 = time.perf_counter()
            ctx.decode([Token(FIRST_ID + s, P, s) for s in range(k)])
            times[(flash, P)][k].append(time.perf_counter() - t0)
            for s in range(k):
                ctx.seq_rm(s, P, -1)
rows = []
for (flash, P), by_k in times.items():
    med = {k: statistics.median(v) * 1e3 for k, v in by_k.items()}
    rows.append({"flash": flash, "context": P, "ms": med})
    print(f"flash={flash!s:5s} P={P:3d} k=1 {med[1]:5.2f} ms  " +
          "  ".join(f"k={k} {med[k]:5.2f} ({med[k] / med[1]:.2f}x)" for k in KS[1:]), flush=True)
json.dump({"cpu": cpu_description(), "model": model, "repeats": R,
           "date": time.strftime("%Y-%m-%d %H:%M"), "rows": rows}, open(OUT, "w"), indent=1)
