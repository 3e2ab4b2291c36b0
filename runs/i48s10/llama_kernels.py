"""Issue 48, tenth session: what a k-token llama.cpp pass costs per weight format and kernel
path on this CPU (repack on/off, flash on/off), k tokens in k sequences after 64 context
tokens, median of `--repeats` passes, formats interleaved. Run on a quiet CPU."""
import ctypes, faulthandler, json, statistics, sys, time
faulthandler.dump_traceback_later(240, exit=True)
from pathlib import Path
import llama_cpp as L
from solm.llamacpp.binding import LlamaContext, Token
from solm.llamacpp.engine import gguf_for
from solm.engines.probe import context_ids, FIRST_ID
from solm.decode.bandwidth import cpu_description

OUT = Path(sys.argv[1])
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 25
KS = (1, 2, 3, 4, 6, 8)
model = "baseline-sft-cpu"
src = gguf_for(model, "f32")
gdir = Path(src).parent
files = {"q4_0": gguf_for(model, "q4_0"), "q8_0": gguf_for(model, "q8_0")}
for name, ftype, pure in [("iq4_nl", L.LLAMA_FTYPE_MOSTLY_IQ4_NL, True),
                          ("q4_0_llq", L.LLAMA_FTYPE_MOSTLY_Q4_0, False)]:
    out = gdir / f"i48s10-{model}-{name}.gguf"
    if not out.exists():
        p = L.llama_model_quantize_default_params()
        p.ftype, p.pure, p.nthread = ftype, pure, 2
        rc = L.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(p))
        assert rc == 0, (name, rc)
    files[name] = out
untied = gdir / f"i48s10-{model}-q4_0_untied.gguf"  # written by untie.py: output.weight of its own
if untied.exists():
    files["q4_0_untied"] = untied
C = 64
ctxs = {}
for name, path in files.items():
    for repack in (True, False):
        for flash in (False, True):
            ctx = LlamaContext(path, n_ctx=max(KS) * (C + 1) + 16, n_seq=max(KS),
                               flash_attn=flash, repack=repack)
            for s in range(max(KS)):
                ids = context_ids(s, C)
                ctx.decode([Token(t, p, s, logits=p == C - 1) for p, t in enumerate(ids)])
            ctxs[(name, repack, flash)] = ctx
times = {key: {k: [] for k in KS} for key in ctxs}
for r in range(REPEATS):
    for key, ctx in ctxs.items():
        for k in KS:
            t0 = time.perf_counter()
            ctx.decode([Token(FIRST_ID + s, C, s) for s in range(k)])
            times[key][k].append(time.perf_counter() - t0)
            for s in range(k):
                ctx.seq_rm(s, C, -1)
rows = []
for (name, repack, flash), by_k in times.items():
    med = {k: statistics.median(v) * 1e3 for k, v in by_k.items()}
    rows.append({"format": name, "repack": repack, "flash": flash,
                 "bytes": Path(files[name]).stat().st_size, "ms": med})
    print(f"{name:10s} repack={repack!s:5s} flash={flash!s:5s} k=1 {med[1]:6.2f} ms  " +
          "  ".join(f"k={k} {med[k] / med[1]:.2f}x" for k in KS[1:]), flush=True)
OUT.write_text(json.dumps({"cpu": cpu_description(), "date": time.strftime("%Y-%m-%d %H:%M"),
                           "context": C, "repeats": REPEATS, "rows": rows}, indent=1) + "\n")
