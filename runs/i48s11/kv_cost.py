"""Issue 48, eleventh session: a k-token pass's cost per KV cache type (F16, F32, Q8_0) and
flash attention on/off, at decode-sized contexts (a shared prompt of P tokens forked to k
sequences, 1024 cells, 256 sequences, unified); median of R passes, interleaved. Quiet CPU."""
import json, statistics, sys, time
from solm.llamacpp.binding import LlamaContext, Token
from solm.llamacpp.engine import gguf_for
from solm.engines.probe import context_ids, FIRST_ID
from solm.decode.bandwidth import cpu_description

OUT, R = sys.argv[1], int(sys.argv[2])
gguf = gguf_for("baseline-sft-cpu", "q4_0")
KS, PS = (1, 2, 3), (128, 300)
variants = {}
for kv in ("f16", "f32", "q8_0"):
    for flash in (True, False):
        if kv == "q8_0" and not flash:
            continue  # llama.cpp quantizes V only with flash attention
        for P in PS:
            ctx = LlamaContext(gguf, n_ctx=1024, n_seq=256, flash_attn=flash, kv_type=kv)
            ids = context_ids(0, P)
            ctx.decode([Token(t, p, 0, logits=p == P - 1) for p, t in enumerate(ids)])
            for s in range(1, max(KS)):
                ctx.seq_cp(0, s)
            variants[(kv, flash, P)] = ctx
times = {key: {k: [] for k in KS} for key in variants}
for r in range(R):
    for (kv, flash, P), ctx in variants.items():
        for k in KS:
            t0 = time.perf_counter()
            ctx.decode([Token(FIRST_ID + s, P, s) for s in range(k)])
            times[(kv, flash, P)][k].append(time.perf_counter() - t0)
            for s in range(k):
                ctx.seq_rm(s, P, -1)
rows = []
for (kv, flash, P), by_k in times.items():
    med = {k: statistics.median(v) * 1e3 for k, v in by_k.items()}
    rows.append({"kv": kv, "flash": flash, "context": P, "ms": med})
    print(f"kv={kv:5s} flash={flash!s:5s} P={P:3d} k=1 {med[1]:5.2f} ms  " +
          "  ".join(f"k={k} {med[k]:5.2f} ({med[k] / med[1]:.2f}x)" for k in KS[1:]), flush=True)
json.dump({"cpu": cpu_description(), "repeats": R, "date": time.strftime("%Y-%m-%d %H:%M"),
           "rows": rows}, open(OUT, "w"), indent=1)
