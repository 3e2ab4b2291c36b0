"""Peak memory of one long prompt's prefill: the device step's (`DeviceSlotStep`, the pass
over the prompt's own window of slots, every row's logits returned, as every step's prefill
returns them) against a plain causal forward of the same prompt (transformers, SDPA, a KV
cache), with every row's logits (the same outputs) and with the last row's only, each in a
process of its own.

    python bench/prefill_memory.py [--model smollm2-135m] [--tokens 4096] [--out FILE.json]

Memory is the process's resident set, sampled every millisecond during the forward, minus
what it held just before (the model and the step's pool already allocated, a short warm-up
pass done). CPU only; what a GPU allocator would report is not measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

SIDES = ("plain_every_row", "plain_last_row", "device_step")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """The highest resident set seen while the block runs, above the set at its start."""

    def __enter__(self):
        self.start = self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())
        self.growth = self.peak - self.start


def measure(side: str, model_name: str, tokens: int) -> dict:
    import torch

    from solm.core.models import load_model
    from solm.core.structure import BATCH_ATTR_NAMES, and_masks, same_request
    from solm.core.systems.pasta import ATTR_NAMES, pasta_visible
    from solm.engines.torch.device_step import DeviceSlotStep

    model, _ = load_model(model_name, dtype="fp32")
    model.eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 20000, (tokens,), generator=gen).tolist()
    n = tokens

    def attrs(k: int) -> dict:
        return {"thread": [0] * k, "order": list(range(k)), "anchor": list(range(k)),
                "epoch": [0] * k, "join": [0] * k, "request": [1] * k, "group": [-1] * k,
                "shared": [0] * k}

    with torch.no_grad():
        if side.startswith("plain"):
            keep = 1 if side == "plain_last_row" else 0

            def run(k):
                model(torch.tensor([ids[:k]]), use_cache=True, logits_to_keep=keep)
        else:
            step = DeviceSlotStep(model, n + 8, and_masks(same_request, pasta_visible),
                                  (*ATTR_NAMES, *BATCH_ATTR_NAMES))

            def run(k):
                step(ids[:k], list(range(k)), attrs(k), list(range(k)), [(k, [(0, k)])],
                     prefill=True)
        run(16)  # warm-up: kernels loaded, the pool touched
        with PeakRss() as peak:
            run(n)
    vocab = model.get_output_embeddings().weight.shape[0]
    return {"side": side, "tokens": n, "peak_growth_mb": round(peak.growth / 2**20, 1),
            "every_rows_logits_mb": round(n * vocab * 4 / 2**20, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--out", default=None)
    ap.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # the child's one side
    args = ap.parse_args(argv)
    if args.side:
        print(json.dumps(measure(args.side, args.model, args.tokens)))
        return 0
    from solm.engines.bandwidth import cpu_description

    rows = []
    for side in SIDES:
        out = subprocess.run([sys.executable, __file__, "--side", side, "--model", args.model,
                              "--tokens", str(args.tokens)], capture_output=True, text=True,
                             check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    peak = {r["side"]: r["peak_growth_mb"] for r in rows}
    ratio = peak["device_step"] / peak["plain_every_row"]
    ratio_last = peak["device_step"] / peak["plain_last_row"]
    summary = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_description(),
               "model": args.model, "dtype": "fp32",
               "command": "python bench/prefill_memory.py " + " ".join(
                   sys.argv[1:] if argv is None else argv),
               "rows": rows, "device_step_over_plain_every_row": round(ratio, 2),
               "device_step_over_plain_last_row": round(ratio_last, 2),
               "within_2x": ratio <= 2.0 and ratio_last <= 2.0}
    print(f"device step peak / plain causal forward peak: {ratio:.2f}x (every row's logits, "
          f"the same outputs), {ratio_last:.2f}x (the last row's only)", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
