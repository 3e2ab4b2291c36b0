"""solm's runtime on llama.cpp against llama.cpp's own loop, one token a pass both: what solm's
Python step adds to a pass (the same GGUF, the same prompt and length; fastest of 5,
alternating). Run on a quiet CPU."""
import sys
import time

sys.path.insert(0, "bench")
from pasta_vs_llamacpp import decode_config  # noqa: E402

from solm.core.chat import prompt_ids  # noqa: E402
from solm.core.jsonl import read_jsonl  # noqa: E402
from solm.decode.pasta.system import runtime_on_engine  # noqa: E402
from solm.engines import get_engine  # noqa: E402

model = sys.argv[1] if len(sys.argv) > 1 else "pasta-sft-overlap-cpu"
rows = list(read_jsonl(sys.argv[2]))[:4]
rt, settings = runtime_on_engine(model, "sequential", "llama.cpp", "q4_0", "auto", None, 1024)
own = get_engine("llama.cpp").sequential_loop(settings, 1024)
cfg = decode_config(model, 192, "sequential")
answers = []
for r in rows:
    p = prompt_ids(rt.tokenizer, r["instruction"])
    answers.append((p, rt.generate(p, cfg).ids))
import os
print("generated", flush=True)
while not os.path.exists("/tmp/prof/go.flag"):
    time.sleep(1)
solm_s = own_s = tokens = 0
for p, ids in answers:
    a, b = [], []
    for k in range(5):
        for side in ("solm", "own") if k % 2 == 0 else ("own", "solm"):
            if side == "solm":
                res = rt.replay(p, ids, mode="sequential")
                a.append(res.decode_s / res.forward_passes)
            else:
                b.append(own.generate(p, len(ids))[2] / (len(ids) - 1))
    solm_s += min(a)
    own_s += min(b)
    print(f"{len(ids)} tokens: solm {min(a) * 1e3:.2f} ms a pass, own loop {min(b) * 1e3:.2f} "
          f"ms a token ({min(a) / min(b):.3f}x)", flush=True)
print(f"mean: solm {solm_s / len(answers) * 1e3:.2f} ms, own {own_s / len(answers) * 1e3:.2f} ms, "
      f"{solm_s / own_s:.3f}x; {time.strftime('%Y-%m-%d %H:%M')}")
