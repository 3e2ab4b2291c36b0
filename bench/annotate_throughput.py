"""How long LLM annotation takes at a concurrency, against the test suite's fake server (a
local HTTP server speaking Gemini and OpenAI, with a share of 429 / 500 / slow / truncated /
unfaithful / unparsable replies), through the real SDK clients. What it measures is solm's
job machinery: queueing, retries, backoff, validation and the writes, not a real LLM.

    python bench/annotate_throughput.py --rows 1000 --concurrency 32 \
        --out bench/results/annotate_throughput.json

The tests check that every row ends in exactly one file; the time lives here (a test with a
wall-clock deadline fails on a busy machine)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from solm.engines.bandwidth import cpu_description

TESTS = Path(__file__).resolve().parent.parent / "tests"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--fault-rate", type=float, default=0.10)
    ap.add_argument("--timeout", type=float, default=2.0,
                    help="client seconds per request; the fake slow reply takes 2x this")
    ap.add_argument("--backends", nargs="+", default=["gemini", "openai"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    sys.path.insert(0, str(TESTS))
    import os

    from conftest import sample_records  # the committed instruct sample, cycled
    from fake_llm_server import FakeLLM

    from solm.annotate.llm_job import LLMAnnotateConfig, annotate_with_llm
    from solm.core.llm import make_client
    from solm.core.models import load_tokenizer
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pasta")

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False).input_ids)

    os.environ.setdefault("GEMINI_API_KEY", "bench-key")
    os.environ.setdefault("OPENAI_API_KEY", "bench-key")
    rows = []
    for backend in args.backends:
        recs = sample_records(args.rows)
        with tempfile.TemporaryDirectory() as tmp, \
                FakeLLM(count, fault_rate=args.fault_rate, seed=7,
                        slow_s=2 * args.timeout) as server:
            client = make_client(f"{backend}:fake@{server.url}", timeout=args.timeout)
            cfg = LLMAnnotateConfig(concurrency=args.concurrency, max_tries=6, base_delay=0.1,
                                    max_delay=1.0)
            t = time.perf_counter()
            summary = asyncio.run(annotate_with_llm(recs, client, Path(tmp) / "out.jsonl",
                                                    Path(tmp) / "rej.jsonl", count, cfg))
            elapsed = time.perf_counter() - t
        row = {"backend": backend, "rows": args.rows, "concurrency": args.concurrency,
               "seconds": round(elapsed, 2), "rows_per_s": round(args.rows / elapsed, 1),
               "requests": server.requests, "faults": dict(server.fault_counts),
               "accepted": summary.accepted, "rejected": summary.rejected}
        rows.append(row)
        print(f"{backend}: {args.rows} rows in {elapsed:.1f} s ({row['rows_per_s']} rows/s), "
              f"{server.requests} requests, faults {server.fault_counts}, "
              f"accepted {summary.accepted}, rejected {summary.rejected}")
    if args.out:
        record = {"date": date.today().isoformat(), "cpu": cpu_description(),
                  "command": " ".join(sys.argv), "runs": rows}
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
