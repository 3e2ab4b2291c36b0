"""Issue 48, eleventh session: does a llama.cpp context's n_seq_max (256 in a PASTA decode, 1
in the own loop) or its shape (shared prompt cells forked by seq_cp, as a decode does; private
cells, as the probe does) change what a k-token pass costs? q4_0, flash as measured here,
P context tokens, median of R passes, every variant interleaved. Run on a quiet CPU."""
import json, statistics, sys, time
from solm.llamacpp.binding import LlamaContext, Token
from solm.llamacpp.engine import gguf_for
from solm.engines.probe import context_ids, FIRST_ID
from solm.engines.cost import flash_attn_here
from solm.decode.bandwidth import cpu_description

OUT, R = sys.argv[1], int(sys.argv[2])
P = int(sys.argv[3]) if len(sys.argv) > 3 else 150
gguf = gguf_for("baseline-sft-cpu", "q4_0")
flash = flash_attn_here()
KS = (1, 2, 3, 4)
variants = {}
for n_seq in (1, 4, 16, 64, 256):
    for shape in ("shared", "private"):
        if n_seq == 1 and shape == "private":
            continue
        ctx = LlamaContext(gguf, n_ctx=1024, n_seq=n_seq, flash_attn=flash)
        if shape == "shared":
            ids = context_ids(0, P)
            ctx.decode([Token(t, p, 0, logits=p == P - 1) for p, t in enumerate(ids)])
            for s in range(1, min(n_seq, max(KS))):
                ctx.seq_cp(0, s)
        else:
            for s in range(min(n_seq, max(KS))):
                ids = context_ids(s, P // 2)  # private cells: 4 x P/2 in all
                ctx.decode([Token(t, p, s, logits=False) for p, t in enumerate(ids)])
        variants[(n_seq, shape)] = ctx
times = {key: {k: [] for k in KS if k <= key[0]} for key in variants}
for r in range(R):
    for key, ctx in variants.items():
        at = P if key[1] == "shared" else P // 2
        for k in times[key]:
            t0 = time.perf_counter()
            ctx.decode([Token(FIRST_ID + s, at, s) for s in range(k)])
            times[key][k].append(time.perf_counter() - t0)
            for s in range(k):
                ctx.seq_rm(s, at, -1)
rows = []
for (n_seq, shape), by_k in times.items():
    med = {k: statistics.median(v) * 1e3 for k, v in by_k.items()}
    rows.append({"n_seq": n_seq, "shape": shape, "ms": med})
    print(f"n_seq={n_seq:3d} {shape:7s} " + "  ".join(f"k={k} {m:5.2f}" for k, m in med.items()),
          flush=True)
json.dump({"cpu": cpu_description(), "flash": flash, "context": P, "repeats": R,
           "date": time.strftime("%Y-%m-%d %H:%M"), "rows": rows}, open(OUT, "w"), indent=1)
