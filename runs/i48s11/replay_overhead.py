"""Issue 48, eleventh session: where a PASTA replay's time goes on llama.cpp: the replay's
decode seconds against the seconds inside llama_decode (the C call alone), per prompt; then a
cProfile of one replay. Quiet CPU.

    python runs/i48s11/replay_overhead.py MODEL PROMPTS.jsonl N"""
import cProfile, pstats, sys, time
sys.path.insert(0, "bench")
from pasta_vs_llamacpp import decode_config  # noqa: E402
from solm.core.chat import prompt_ids  # noqa: E402
from solm.core.jsonl import read_jsonl  # noqa: E402
from solm.decode.pasta.system import runtime_on_engine  # noqa: E402
import solm.llamacpp.binding as binding  # noqa: E402

model, prompts, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rt, _ = runtime_on_engine(model, "parallel", "llama.cpp", "q4_0", "auto", None, 1024)
cfg = decode_config(model, 256, "parallel")
answers = []
for r in list(read_jsonl(prompts))[:n]:
    p = prompt_ids(rt.tokenizer, r["instruction"])
    answers.append((p, rt.generate(p, cfg).ids))
L = binding.llama_cpp_module()
inner = L.llama_decode
spent = [0.0]


def timed_decode(ctx, batch):
    t0 = time.perf_counter()
    rc = inner(ctx, batch)
    spent[0] += time.perf_counter() - t0
    return rc


L.llama_decode = timed_decode
tot_d = tot_c = 0.0
for p, ids in answers:
    best = None
    for _ in range(3):
        spent[0] = 0.0
        res = rt.replay(p, ids, mode="parallel")
        if best is None or res.decode_s < best[0]:
            best = (res.decode_s, spent[0], res.forward_passes)
    tot_d, tot_c = tot_d + best[0], tot_c + best[1]
    print(f"{best[2]} passes: replay {best[0] * 1e3 / best[2]:.2f} ms/pass, llama_decode "
          f"{best[1] * 1e3 / best[2]:.2f} ms/pass, outside {(best[0] - best[1]) * 1e3 / best[2]:.2f}")
print(f"all: outside llama_decode {100 * (tot_d - tot_c) / tot_d:.1f}% of the replay")
prof = cProfile.Profile()
prof.enable()
for p, ids in answers[:3]:
    rt.replay(p, ids, mode="parallel")
prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(25)
