"""What the HTTP server costs: the same greedy prompts decoded in-process (`rt.generate`) and
through `pasta serve` (one client, then 8 at once), in one run on a quiet CPU.

    python bench/serve_overhead.py --prompts 8 --max-tokens 64 --out bench/results/serve.json

Reports per-request wall time both ways and their ratio, and the 8-client wall time against
the sum of the in-process decodes (requests queue: the ideal ratio is 1.0)."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

from solm.decode.bandwidth import cpu_description

TOPICS = ("sleep", "tea", "running", "chess", "gardens", "rain", "bread", "music", "rivers",
          "birds", "bicycles", "clouds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from openai import OpenAI

    from solm.core.chat import prompt_ids
    from solm.core.vocabulary import add_control_tokens
    from solm.core.models import load_model
    from solm.core.sampling import SamplingConfig
    from solm.core.records import Record
    from solm.decode.pasta.decode_file import result_record
    from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime

    prompts = [f"Give one tip about {t}." for t in TOPICS[:args.prompts]]
    m, tok = load_model(args.model, dtype=args.dtype)
    add_control_tokens(m, tok, "pasta")
    rt = PastaRuntime(m, tok, pool_size=4096)
    cfg = PastaDecodeConfig(max_new_tokens=args.max_tokens, sampling=SamplingConfig())
    rt.generate(prompt_ids(tok, "warm up"), cfg)
    local, local_text = [], []
    for p in prompts:
        t0 = time.perf_counter()
        res = rt.generate(prompt_ids(tok, p), cfg)
        local.append(time.perf_counter() - t0)
        local_text.append(result_record(rt, Record("b", p), res, cfg.mode)["response"])

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "solm.cli.main", "pasta", "serve", "-m",
                               args.model, "--port", str(port), "--dtype", args.dtype, "-q",
                               "--max-new-tokens", str(args.max_tokens)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=600)

        def ask(p: str):
            t0 = time.perf_counter()
            r = client.chat.completions.create(model=args.model, temperature=0,
                                               max_tokens=args.max_tokens,
                                               messages=[{"role": "user", "content": p}])
            return time.perf_counter() - t0, r

        ask("warm up")
        served = [ask(p) for p in prompts]
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            together = list(pool.map(ask, prompts))
        concurrent_wall = time.perf_counter() - t0
    finally:
        server.terminate()
        server.wait(timeout=30)

    same = sum(text == r.choices[0].message.content
               for text, (_, r) in zip(local_text, served))
    summary = {
        "cpu": cpu_description(), "threads": os.cpu_count(), "dtype": args.dtype,
        "prompts": len(prompts), "max_tokens": args.max_tokens,
        "tokens": sum(r.usage.completion_tokens for _, r in served),
        "in_process_s_per_request": round(sum(local) / len(local), 4),
        "server_s_per_request": round(sum(t for t, _ in served) / len(served), 4),
        "server_over_in_process": round(sum(t for t, _ in served) / sum(local), 4),
        "eight_clients_wall_s": round(concurrent_wall, 3),
        "eight_clients_over_sum_in_process": round(concurrent_wall / sum(local), 4),
        "answers_identical": f"{same}/{len(prompts)}",
        "concurrent_answers_identical": sum(
            a.choices[0].message.content == b.choices[0].message.content
            for (_, a), (_, b) in zip(served, together)),
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
