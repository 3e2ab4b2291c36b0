"""What a Planned Diffusion denoising pass costs against a one-token decode step, on this
machine: one forward pass feeding W tokens (chunk slots) over a KV cache of C tokens (prompt
and plan), for widths from 1 up to several 30-slot chunks. A denoising pass pays off in wall
time only when it yields more content tokens than its cost in one-token steps.

    python bench/pdiff_pass_cost.py --model pdiff-cpu --out bench/results/pdiff_pass_cost.json

Run it on a quiet machine (no tests or training beside it).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="pdiff-cpu")
    ap.add_argument("--context", type=int, default=300, help="tokens already in the cache")
    ap.add_argument("--widths", default="1,10,30,60,90,120,180,240")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from solm.core.models import load_decoder
    from solm.core.structure import and_masks, same_request
    from solm.core.systems.pdiff import ATTR_NAMES, pdiff_visible
    from solm.core.structure import BATCH_ATTR_NAMES
    from solm.engines.torch.slots import SlotStep

    model, tok = load_decoder(args.model, dtype=args.dtype, system="pdiff")
    widths = [int(w) for w in args.widths.split(",")]
    step = SlotStep(model, args.context + max(widths) + 8, and_masks(same_request, pdiff_visible),
                    (*ATTR_NAMES, *BATCH_ATTR_NAMES))

    def columns(n: int, start: int) -> dict[str, list[int]]:
        # one request, every token a main-thread token in order (a causal read: the cost of
        # a pass depends on its width and the keys read, not on which tokens see which)
        return {"thread": [0] * n, "order": list(range(start, start + n)),
                "anchor": list(range(start, start + n)), "epoch": [0] * n, "join": [0] * n,
                "request": [1] * n, "group": [-1] * n, "shared": [0] * n}

    ctx = args.context
    step(list(range(100, 100 + ctx)), list(range(ctx)), columns(ctx, 0), range(ctx),
         [(ctx, [(0, ctx)])], prefill=True)
    results = {}
    for w in widths:
        times = []
        for r in range(args.repeats + 1):
            t0 = time.perf_counter()
            step([200] * w, list(range(ctx, ctx + w)), columns(w, ctx), range(ctx, ctx + w),
                 [(w, [(0, ctx + w)])])
            if r:  # the first is a warm-up
                times.append(time.perf_counter() - t0)
        results[w] = statistics.median(times)
    one = results[widths[0]]
    table = {w: {"ms": round(1000 * t, 2), "one_token_steps": round(t / one, 2)}
             for w, t in results.items()}
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor()) \
        if platform.system() == "Linux" else platform.processor()
    flags = open("/proc/cpuinfo").read() if platform.system() == "Linux" else ""
    out = {"model": args.model, "dtype": str(next(model.parameters()).dtype),
           "context": ctx, "threads": torch.get_num_threads(), "cpu": cpu,
           "avx512_bf16": "avx512_bf16" in flags, "avx2": "avx2" in flags,
           "widths": table}
    print(json.dumps(out, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
