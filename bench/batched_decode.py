"""Batched PASTA decoding against one prompt at a time, side by side in one run.

    python bench/batched_decode.py [--model smollm2-135m] [--mode sequential]
        [--batch-sizes 1,4,16] [--max-new-tokens 128] [--prompts FILE] [--out FILE.json]

Decodes the same prompts (16 built-in instructions, or `--prompts`) greedily: first one at a
time with `PastaRuntime` (today's `pasta decode --batch-size 1`), then with
`BatchedPastaRuntime` at each batch size. Reports per run: wall time, tokens decoded per
second (every token of every answer, tags included), content tokens per second, mean
per-request latency (admission to finish), forward passes, the memory bandwidth the steps
achieved, and how many answers equal the one-at-a-time answers token for token. Decode
settings are the model's (its generation_config.json, as `pasta decode` reads it). Time it on
a quiet CPU: nothing else using torch threads.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

PROMPTS = [
    "Give me three tips for staying healthy.", "What are the primary colors?",
    "Describe the water cycle in a few sentences.", "List four animals that live in the sea.",
    "How do I make a cup of tea?", "Explain what a computer program is to a child.",
    "Name three famous painters and one painting by each.",
    "What should I pack for a weekend trip to the mountains?",
    "Write a short poem about autumn.", "What are the benefits of reading books?",
    "How can I improve my sleep?", "Suggest three names for a bakery.",
    "What is the difference between weather and climate?",
    "Give me a recipe for a simple salad.", "Why is exercise important?",
    "Compare cats and dogs as pets."]


def run_solo(rt, prompts, cfg):
    started, results, latencies = time.perf_counter(), [], []
    for ids in prompts:
        t0 = time.perf_counter()
        results.append(rt.generate(ids, cfg))
        latencies.append(time.perf_counter() - t0)
    return time.perf_counter() - started, results, latencies, sum(r.forward_passes
                                                                 for r in results)


def run_batched(batched, prompts, cfg):
    from solm.decode.pasta.batched import BatchRequest

    started = time.perf_counter()
    steps_before = batched.steps
    out, latencies = {}, []
    for done in batched.run(BatchRequest(i, p, cfg) for i, p in enumerate(prompts)):
        out[done.rid] = done.result
        latencies.append(done.result.wall_s)
    wall = time.perf_counter() - started
    return wall, [out[i] for i in range(len(prompts))], latencies, batched.steps - steps_before


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--mode", default="sequential", choices=("sequential", "parallel"))
    p.add_argument("--batch-sizes", default="1,4,16")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--prompts", type=Path, default=None)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--compile", action="store_true",
                   help="also time each batch size with the compiled step (built on an "
                        "untimed first pass over the prompts; graphs and build time reported)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()

    from solm.core.chat import prompt_ids, text_ids
    from solm.core.generation import resolve_decode
    from solm.core.models import load_decoder
    from solm.core.quantize import weight_bytes
    from solm.core.records import load_records
    from solm.core.sampling import SamplingConfig
    from solm.engines.bandwidth import cpu_description
    from solm.decode.pasta.batched import BatchedPastaRuntime
    from solm.decode.pasta.decode_file import result_record
    from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime
    from solm.core.records import Record

    texts = ([r.prompt for r in load_records(args.prompts)] if args.prompts else PROMPTS)
    model, tok = load_decoder(args.model, dtype=args.dtype)
    decoding = resolve_decode(args.model, {})
    cfg = PastaDecodeConfig(mode=args.mode, max_new_tokens=args.max_new_tokens,
                            sampling=SamplingConfig(**decoding.values))
    prompts = [prompt_ids(tok, t) for t in texts]
    pool = max(len(x) for x in prompts) + args.max_new_tokens + 8
    solo = PastaRuntime(model, tok, pool_size=pool)
    solo.generate(prompt_ids(tok, "Say hello."), PastaDecodeConfig(max_new_tokens=4))  # warm
    rows = []

    def record(label, batch, wall, results, latencies, steps, reference, **extra):
        content = sum(len(text_ids(tok, result_record(solo, Record("b", ""), r,
                                                      args.mode)["response"]))
                      for r in results)
        tokens = sum(len(r.ids) for r in results)
        rows.append({
            "run": label, "batch": batch, "wall_s": round(wall, 2),
            "tokens": tokens, "tokens_per_s": round(tokens / wall, 2),
            "content_tokens_per_s": round(content / wall, 2),
            "mean_latency_s": round(sum(latencies) / len(latencies), 2),
            "forward_passes": steps,
            "bandwidth_gbs": round(weight_bytes(model) * steps / wall / 1e9, 2),
            "equal_to_one_at_a_time": sum(a.ids == b.ids for a, b in zip(results, reference))
            if reference else None, **extra})
        print(json.dumps(rows[-1]), flush=True)

    wall, reference, lat, steps = run_solo(solo, prompts, cfg)
    record("one at a time (PastaRuntime)", 1, wall, reference, lat, steps, None)
    for b in (int(x) for x in args.batch_sizes.split(",")):
        batched = BatchedPastaRuntime(model, tok, pool_size=pool * b, max_batch=b)
        batched.generate_many([prompt_ids(tok, "Say hello.")], PastaDecodeConfig(
            max_new_tokens=4))  # warm
        wall, results, lat, steps = run_batched(batched, prompts, cfg)
        record(f"batched, batch {b}", b, wall, results, lat, steps, reference)
        if args.compile:
            batched = BatchedPastaRuntime(model, tok, pool_size=pool * b, max_batch=b,
                                          compile=True)
            t0 = time.perf_counter()
            run_batched(batched, prompts, cfg)  # builds the graphs these steps use
            first_pass = time.perf_counter() - t0
            wall, results, lat, steps = run_batched(batched, prompts, cfg)
            record(f"batched, batch {b}, compiled", b, wall, results, lat, steps, reference,
                   graphs=batched.forward.compiled.compiles,
                   graph_build_s=round(batched.forward.compile_s, 1),
                   first_pass_s=round(first_pass, 1))
    base = rows[0]["tokens_per_s"]
    summary = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(["python", *sys.argv]),
               "model": args.model, "mode": args.mode, "prompts": len(prompts),
               "max_new_tokens": args.max_new_tokens, "dtype": str(model.dtype),
               "decoding": decoding.describe(), "cpu": cpu_description(),
               "runs": rows,
               "speedup_vs_one_at_a_time": {r["run"]: round(r["tokens_per_s"] / base, 2)
                                            for r in rows[1:]}}
    print(json.dumps(summary["speedup_vs_one_at_a_time"]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
