"""What a pass of each width costs inside a real PASTA decode on llama.cpp, against the own
loop's token: the kept answers of a model replayed on their parallel schedule, each pass
timed (solm's whole step, and llama_decode alone), grouped by tokens fed; fastest of 3
replays per pass. Run on a quiet CPU.

    python runs/i48s10/pass_cost_in_decode.py MODEL PROMPTS.jsonl N OUT.json"""
import json
import statistics
import sys
import time

sys.path.insert(0, "bench")
from pasta_vs_llamacpp import decode_config  # noqa: E402

from solm.core.chat import prompt_ids  # noqa: E402
from solm.core.jsonl import read_jsonl  # noqa: E402
from solm.decode.pasta.system import runtime_on_engine  # noqa: E402
from solm.engines import get_engine  # noqa: E402
import solm.llamacpp.binding as binding  # noqa: E402

model, prompts, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = list(read_jsonl(prompts))[:n]
rt, settings = runtime_on_engine(model, "parallel", "llama.cpp", "q4_0", "auto", None, 1024)
brt, bsettings = runtime_on_engine("baseline-sft-cpu", "sequential", "llama.cpp", "q4_0",
                                   "auto", None, 1024)
own = get_engine("llama.cpp").sequential_loop(bsettings, 1024)
cfg = decode_config(model, 256, "parallel")
answers = []
for r in rows:
    p = prompt_ids(rt.tokenizer, r["instruction"])
    answers.append((p, rt.generate(p, cfg).ids, prompt_ids(brt.tokenizer, r["instruction"])))

engine_s: list[float] = []
piece = binding.LlamaContext._decode_piece


def timed_piece(self, tokens):
    t0 = time.perf_counter()
    result = piece(self, tokens)
    engine_s.append(time.perf_counter() - t0)
    return result


class Timed:
    def __init__(self, step):
        self.step, self.log = step, []

    def __call__(self, tokens, attrs, prefill=False):
        t0 = time.perf_counter()
        result = self.step(tokens, attrs, prefill=prefill)
        if not prefill:
            self.log.append((len(tokens), time.perf_counter() - t0, engine_s[-1]))
        return result

    def __getattr__(self, name):
        return getattr(self.step, name)


binding.LlamaContext._decode_piece = timed_piece
step = rt.forward
by_width: dict[int, list[tuple[float, float]]] = {}
own_token: list[float] = []
for p, ids, bp in answers:
    runs = []
    for _ in range(3):
        rt.forward = timed = Timed(step)
        rt.replay(p, ids, mode="parallel")
        runs.append(timed.log)
        own_token.append(own.generate(bp, 128)[2] / 127)
    for passes in zip(*runs):
        width = passes[0][0]
        by_width.setdefault(width, []).append((min(x[1] for x in passes),
                                               min(x[2] for x in passes)))
rt.forward = step
own_ms = min(own_token) * 1e3
table = {w: {"passes": len(v), "step_ms": statistics.median(x[0] for x in v) * 1e3,
             "llama_decode_ms": statistics.median(x[1] for x in v) * 1e3}
         for w, v in sorted(by_width.items())}
print(f"own loop: {own_ms:.2f} ms a token (fastest)")
for w, t in table.items():
    print(f"width {w}: {t['passes']} passes, step {t['step_ms']:.2f} ms ({t['step_ms'] / own_ms:.2f}x), "
          f"llama_decode {t['llama_decode_ms']:.2f} ms ({t['llama_decode_ms'] / own_ms:.2f}x)")
json.dump({"model": model, "own_loop_ms": own_ms, "widths": table,
           "date": time.strftime("%Y-%m-%d %H:%M")}, open(out, "w"), indent=1)
