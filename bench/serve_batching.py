"""Requests per second of `pasta serve` under 8 concurrent clients (the official `openai`
client), one request at a time (`--max-batch 1`, the queue before batching) against
continuous batching (`--max-batch 8`), side by side in one run.

    python bench/serve_batching.py [--clients 8] [--requests-per-client 3] [--max-tokens 64]
        [--out bench/results/decode_batching/serve.json]
    python bench/serve_batching.py --engines torch,llama.cpp [--gguf-type q8_0] [--out ...]

With `--engines`, both servers batch (`--max-batch` = the clients) and the engines are
compared instead (sequential answers, the mode a Pred-10X model decodes on llama.cpp).

Each server is started, warmed with one request, then every client sends its requests one
after another (greedy, distinct prompts); the figure is completed requests / wall time.
Answers are compared between the two servers (greedy: they should be equal). Run it on a quiet
CPU."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import socket
import subprocess
import sys
import time
import urllib.request

TOPICS = ("sleep", "tea", "running", "chess", "gardens", "rain", "bread", "music", "rivers",
          "birds", "bicycles", "clouds", "maps", "snow", "coffee", "trains", "forests",
          "letters", "boats", "stars", "honey", "kites", "islands", "lamps")


def serve(model: str, max_batch: int, max_tokens: int, dtype: str, engine: str = "torch",
          gguf_type: str = "q8_0"):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "solm.cli.main", "pasta", "serve", "-m",
                             model, "--port", str(port), "--dtype", dtype, "-q",
                             "--max-new-tokens", str(max_tokens), "--max-batch", str(max_batch),
                             "--max-queue", "64", "--engine", engine, "--gguf-type", gguf_type,
                             *(["--mode", "sequential"] if engine != "torch" else [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(480):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise SystemExit("the server exited")
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the server did not start")


def measure(model: str, max_batch: int, args, engine: str = "torch") -> dict:
    from openai import OpenAI

    proc, port = serve(model, max_batch, args.max_tokens, args.dtype, engine, args.gguf_type)
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=900,
                        max_retries=0)

        def ask(prompt: str):
            t0 = time.perf_counter()
            r = client.chat.completions.create(
                model=model, temperature=0, max_tokens=args.max_tokens,
                messages=[{"role": "user", "content": prompt}],
                extra_body={"mode": "sequential"} if args.engines else None)
            return time.perf_counter() - t0, r

        ask("warm up")
        per_client = [[f"Give one tip about {TOPICS[(c * args.requests_per_client + k) % len(TOPICS)]}."
                       for k in range(args.requests_per_client)] for c in range(args.clients)]

        def client_loop(prompts):
            return [(p, *ask(p)) for p in prompts]

        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            done = [x for rows in pool.map(client_loop, per_client) for x in rows]
        wall = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    tokens = sum(r.usage.completion_tokens for _, _, r in done)
    return {"engine": engine, "max_batch": max_batch, "requests": len(done), "wall_s": round(wall, 2),
            "requests_per_s": round(len(done) / wall, 3),
            "tokens_per_s": round(tokens / wall, 2),
            "mean_latency_s": round(sum(t for _, t, _ in done) / len(done), 2),
            "answers": {p: r.choices[0].message.content for p, _, r in done}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests-per-client", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--out", default=None)
    ap.add_argument("--engines", default=None, help="e.g. torch,llama.cpp: compare engines")
    ap.add_argument("--gguf-type", default="q8_0")
    args = ap.parse_args()

    from solm.engines.bandwidth import cpu_description

    if args.engines:
        runs = [measure(args.model, args.clients, args, e) for e in args.engines.split(",")]
    else:
        runs = [measure(args.model, b, args) for b in (1, args.clients)]
    same = sum(runs[0]["answers"][p] == runs[1]["answers"][p] for p in runs[0]["answers"])
    summary = {"cpu": cpu_description(), "model": args.model, "dtype": args.dtype,
               "engines": args.engines, "gguf_type": args.gguf_type if args.engines else None,
               "clients": args.clients, "max_tokens": args.max_tokens,
               "runs": [{k: v for k, v in r.items() if k != "answers"} for r in runs],
               "requests_per_s_ratio": round(runs[1]["requests_per_s"]
                                             / runs[0]["requests_per_s"], 2),
               "answers_equal": f"{same}/{len(runs[0]['answers'])}"}
    print(json.dumps(summary, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
