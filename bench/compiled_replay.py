"""The compiled step against the eager step on `pasta bench` rows, side by side in one run.

    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python bench/compiled_replay.py -a ANNOTATED.jsonl
        [--rows 6] [--max-tokens 400] [--out FILE.json]

Picks rows as `pasta bench` does (at least 2 promises, at most `--max-tokens` plain tokens),
builds every graph their replays need (timed: the build time on the cache it is given; an
empty cache is a fresh machine's), then replays each row in parallel and sequential mode with
the eager runtime and the compiled one, interleaved row by row, and reports the time per
forward pass of each and their ratio. Run it on a quiet CPU.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-a", "--annotated", type=Path, required=True)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    from solm.core.chat import prompt_ids, text_ids
    from solm.core.jsonl import read_jsonl
    from solm.core.models import load_decoder
    from solm.core.pasta_lang import promises, strip
    from solm.engines.bandwidth import cpu_description
    from solm.decode.pasta.runtime import PastaRuntime
    from solm.eval.pasta_bench import compile_for

    model, tok = load_decoder(args.model, dtype=args.dtype)
    rows = []
    for row in read_jsonl(args.annotated):
        text = row.get("annotated")
        if text and len(promises(text)) >= 2 and \
                len(text_ids(tok, strip(text))) <= args.max_tokens:
            rows.append(row)
        if len(rows) >= args.rows:
            break
    eager = PastaRuntime(model, tok, pool_size=2048)
    compiled = PastaRuntime(model, tok, pool_size=2048, compile=True)
    t0 = time.perf_counter()
    compile_for(compiled, rows)
    build_s = time.perf_counter() - t0
    graphs = compiled.forward.compiled.compiles
    pairs = [(prompt_ids(tok, r["prompt"], r.get("system")), text_ids(tok, r["annotated"]))
             for r in rows]
    for rt in (eager, compiled):  # warm both
        rt.replay(*pairs[0], mode="parallel", max_new_tokens=32)
    times = {(name, mode): [0.0, 0] for name in ("eager", "compiled")
             for mode in ("parallel", "sequential")}
    for prompt, response in pairs:
        for mode in ("parallel", "sequential"):
            for name, rt in (("eager", eager), ("compiled", compiled)):
                res = rt.replay(prompt, response, mode=mode)
                t = times[(name, mode)]
                t[0] += res.decode_s
                t[1] += res.forward_passes
    per_step = {f"{name}_{mode}_ms_per_step": round(1000 * s / n, 2)
                for (name, mode), (s, n) in times.items()}
    summary = {"cpu": cpu_description(), "dtype": str(model.dtype), "rows": len(rows),
               "graphs": graphs, "graph_build_s": round(build_s, 1), **per_step,
               "compiled_over_eager_parallel": round(
                   per_step["eager_parallel_ms_per_step"]
                   / per_step["compiled_parallel_ms_per_step"], 3),
               "compiled_over_eager_sequential": round(
                   per_step["eager_sequential_ms_per_step"]
                   / per_step["compiled_sequential_ms_per_step"], 3)}
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
