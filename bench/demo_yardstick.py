"""The demo's yardstick against llama.cpp's own loop in a fresh process, side by side.

`pasta demo` prints a realized speedup "against the fastest sequential decoding here":
llama.cpp's one-token loop on the model's fastest one-token GGUF (q4_0 unless `solm bench
step` measured another). A llama.cpp user checks that figure first, so this script prints,
in one run on one CPU:

1. the demo's figure: `pasta demo` run as a user runs it (a subprocess, `-o` JSON), its
   yardstick's fastest time for the answer's tokens, in ms a token;
2. llama-cpp-python's own `Llama.eval` loop on the same GGUF, in a fresh process that
   imports nothing else: the same prompt, as many tokens, argmax of each pass's logits,
   `--repeats` runs (after a warm one), the fastest and the spread;
3. a bare `llama_decode` loop through llama-cpp-python's C API, the same way (what
   `Llama.eval` costs without its Python bookkeeping);
4. the ratios (the target: the demo's yardstick no more than 10% slower than either).

    python bench/demo_yardstick.py -o runs/bench/demo_yardstick.json

Run it on a quiet machine: it times.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

EVAL_LOOP = r"""
import json, sys, time
import numpy as np
from llama_cpp import Llama

ask = json.loads(sys.argv[1])
llm = Llama(model_path=ask["gguf"], n_ctx=ask["cells"], n_threads=ask["threads"],
            n_batch=512, verbose=False)
times = []
for run in range(ask["repeats"] + 1):  # the first warms, untimed
    llm.reset()
    llm.eval(ask["ids"])
    vocab = llm.n_vocab()
    t0 = time.perf_counter()
    for _ in range(ask["n"]):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))
        llm.eval([int(logits.argmax())])
    if run:
        times.append(time.perf_counter() - t0)
print(json.dumps({"decode_s": times}))
"""


BARE_LOOP = r"""
import ctypes, json, sys, time
import numpy as np
import llama_cpp as L

ask = json.loads(sys.argv[1])
QUIET = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(
    lambda *a: None)  # kept alive: llama.cpp holds the pointer
L.llama_log_set(QUIET, ctypes.c_void_p(0))
L.llama_backend_init()
model = L.llama_model_load_from_file(ask["gguf"].encode(), L.llama_model_default_params())
params = L.llama_context_default_params()
params.n_ctx, params.n_threads, params.n_threads_batch = ask["cells"], ask["threads"], ask["threads"]
params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
ctx = L.llama_init_from_model(model, params)
vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
batch = L.llama_batch_init(len(ask["ids"]), 0, 1)
times = []
for run in range(ask["repeats"] + 1):  # the first warms, untimed
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    batch.n_tokens = len(ask["ids"])
    for i, t in enumerate(ask["ids"]):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, int(i == len(ask["ids"]) - 1)
    L.llama_decode(ctx, batch)
    t0 = time.perf_counter()
    for step in range(ask["n"]):
        tok = int(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(vocab,)).argmax())
        batch.n_tokens = 1
        batch.token[0], batch.pos[0], batch.n_seq_id[0] = tok, len(ask["ids"]) + step, 1
        batch.seq_id[0][0], batch.logits[0] = 0, 1
        L.llama_decode(ctx, batch)
    if run:
        times.append(time.perf_counter() - t0)
print(json.dumps({"decode_s": times}))
"""


def fresh_process(code: str, ask: dict) -> list[float]:
    """The decode seconds a loop measured in a fresh Python process (nothing of solm)."""
    done = subprocess.run([sys.executable, "-c", code, json.dumps(ask)], check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["decode_s"]


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="pasta-bonbon-cpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=512)
    ap.add_argument("-o", "--out", type=Path, required=True)
    return ap.parse_args()


def main() -> None:
    args = parse()
    import torch

    from solm.core.chat import prompt_ids
    from solm.core.models import load_tokenizer
    from solm.decode.pasta.demo import DEMO_PROMPT
    from solm.decode.pasta.system import yardstick_settings
    from solm.engines.bandwidth import cpu_description

    cpu = cpu_description()
    with tempfile.TemporaryDirectory() as tmp:
        demo_json = Path(tmp) / "demo.json"
        subprocess.run([str(Path(sys.executable).parent / "pasta"), "demo", "-m", args.model,
                        "-o", str(demo_json), "--repeats", str(args.repeats),
                        "--max-new-tokens", str(args.max_new_tokens)], check=True,
                       stdout=subprocess.DEVNULL)
        demo = json.loads(demo_json.read_text())
    n = demo["answer_tokens"]
    cells = max(1024, 4 * args.max_new_tokens)
    settings = yardstick_settings(args.model, cells)
    if settings is None:
        sys.exit("llama.cpp cannot run the yardstick here")
    ids = prompt_ids(load_tokenizer(args.model), demo["prompt"] or DEMO_PROMPT)
    ask = {"gguf": str(settings.gguf), "cells": cells, "threads": torch.get_num_threads(),
           "ids": ids, "n": n, "repeats": args.repeats}
    fresh = fresh_process(EVAL_LOOP, ask)
    bare = fresh_process(BARE_LOOP, ask)
    # all time n one-token passes after the prefill
    demo_ms = 1000 * demo["fastest_sequential_s"] / n
    fresh_ms = 1000 * min(fresh) / n
    bare_ms = 1000 * min(bare) / n
    result = {"cpu": cpu, "model": args.model, "gguf": Path(settings.gguf).name,
              "gguf_type": settings.gguf_type, "tokens": n, "repeats": args.repeats,
              "demo_yardstick": demo["fastest_sequential"],
              "demo_yardstick_s": demo["times_s"].get("fastest"),
              "demo_ms_per_token": round(demo_ms, 3),
              "llama_eval_fresh_s": fresh, "llama_eval_ms_per_token": round(fresh_ms, 3),
              "llama_decode_fresh_s": bare, "llama_decode_ms_per_token": round(bare_ms, 3),
              "demo_over_fresh": round(demo_ms / fresh_ms, 3),
              "demo_over_bare": round(demo_ms / bare_ms, 3),
              # the headline is honest when the yardstick is no slower than llama.cpp's own
              # loops by more than 10%: a slow yardstick inflates the speedup printed
              "within_10_percent": demo_ms <= 1.10 * min(fresh_ms, bare_ms),
              "demo_realized_vs_fastest": demo["realized_vs_fastest"],
              "demo_realized_speedup_same_engine": demo["realized_speedup"],
              "engine": demo["engine"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{cpu}; {args.model}, {result['gguf_type']} GGUF, {n} tokens, fastest of "
          f"{args.repeats}")
    print(f"  pasta demo's yardstick ({demo['fastest_sequential']}): {demo_ms:.2f} ms a token")
    print(f"  llama-cpp-python Llama.eval loop, fresh process:  {fresh_ms:.2f} ms a token "
          f"(runs {', '.join(f'{1000 * t / n:.2f}' for t in fresh)})")
    print(f"  bare llama_decode loop (llama_cpp's C API, argmax), fresh process: "
          f"{bare_ms:.2f} ms a token (runs {', '.join(f'{1000 * t / n:.2f}' for t in bare)})")
    print(f"  demo / Llama.eval: {demo_ms / fresh_ms:.3f}; demo / bare loop: "
          f"{demo_ms / bare_ms:.3f} ({'no' if result['within_10_percent'] else 'MORE THAN'} "
          f"10% slower than the faster of them)")
    print(f"  the demo's realized speedup against it: {demo['realized_vs_fastest']:.2f}x "
          f"(against the same engine one token a pass: {demo['realized_speedup']:.2f}x)")


if __name__ == "__main__":
    main()
