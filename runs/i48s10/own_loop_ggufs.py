"""llama.cpp's own loop on two models' q4_0 GGUFs, the same prompt and length (fastest of 7,
alternating): does the PASTA model's GGUF itself cost more a token than the baseline's?"""
import sys
from solm.core.chat import prompt_ids
from solm.core.jsonl import read_jsonl
from solm.decode.pasta.system import runtime_on_engine
from solm.engines import get_engine

models = sys.argv[1:3]
row = list(read_jsonl(sys.argv[3]))[1]
loops = {}
for m in models:
    rt, settings = runtime_on_engine(m, "sequential", "llama.cpp", "q4_0", "auto", None, 1024)
    loops[m] = (get_engine("llama.cpp").sequential_loop(settings, 1024),
                prompt_ids(rt.tokenizer, row["instruction"]), settings.gguf)
for n in (64, 256):
    best = {m: 1e9 for m in models}
    for k in range(7):
        for m in (models if k % 2 == 0 else models[::-1]):
            loop, p, _ = loops[m]
            best[m] = min(best[m], loop.generate(p, n)[2] / (n - 1))
    print(n, {m: round(v * 1e3, 3) for m, v in best.items()},
          f"ratio {best[models[0]] / best[models[1]]:.3f}")
for m in models:
    print(m, loops[m][2])
