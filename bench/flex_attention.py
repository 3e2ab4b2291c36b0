"""SDPA with the dense mask vs FlexAttention with the block mask, on PASTA training masks.

The attention of one training batch, forward and backward (forward only on a CPU, where
FlexAttention has no backward), with the embedded model's shapes
(9 query heads, 3 key/value heads, head size 64), masks from real rule-annotated rows built by
the collator (dense) and by `solm.train.flex` (block mask, from the same terms). Reports the
share of 128 x 128 blocks the block mask skips and the time of each, side by side in one run.
`--attention auto` in training follows this measurement (flex on CUDA, SDPA on a CPU).

    python bench/flex_attention.py --rows runs/sft/sft_rows.jsonl --out bench/results/flex_attention.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

from solm.core.vocabulary import add_control_tokens
from solm.core.jsonl import read_jsonl
from solm.core.models import load_tokenizer
from solm.core.systems.pasta import PastaVocab
from solm.engines.bandwidth import cpu_description
from solm.train.collator import PastaCollator
from solm.train.flex import block_mask_for


def timed(fn, repeats: int) -> float:
    fn()  # warm-up (and, for flex, the compile)
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=Path, required=True, help="annotated rows (pasta annotate)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lengths", default="384,1024", help="pad/truncate rows to these lengths")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pasta")
    vocab = PastaVocab.from_tokenizer(tok)
    rows = [r for r in read_jsonl(args.rows) if (r.get("promises") or 0) >= 3]
    rows = sorted(rows, key=lambda r: -len(r["annotated"]))
    compiled = torch.compile(flex_attention, dynamic=False)
    results = {"machine": cpu_description() if device == "cpu" else
               torch.cuda.get_device_name(), "device": device, "dtype": args.dtype,
               "torch": torch.__version__, "cases": []}
    for length in (int(x) for x in args.lengths.split(",")):
        batch_rows = [{"prompt": r["prompt"], "text": r["annotated"]}
                      for r in rows[:args.batch]]
        dense = PastaCollator(tok, vocab, max_len=length)(batch_rows)
        flex = PastaCollator(tok, vocab, max_len=length, flex=True)(batch_rows)
        t = dense["input_ids"].shape[1]
        mask = dense["attention_mask"].to(device)
        block = block_mask_for(PastaCollator.term, flex["structure_attrs"], flex["lengths"],
                               device)
        torch.manual_seed(0)
        b, hq, hkv, d = len(batch_rows), 9, 3, 64
        # FlexAttention has no backward on a CPU (torch raises): there, forward only
        grad = device == "cuda"
        q = torch.randn(b, hq, t, d, device=device, dtype=dtype, requires_grad=grad)
        k = torch.randn(b, hkv, t, d, device=device, dtype=dtype, requires_grad=grad)
        v = torch.randn(b, hkv, t, d, device=device, dtype=dtype, requires_grad=grad)

        def sdpa():
            out = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1),
                                                 v.repeat_interleave(3, 1), attn_mask=mask)
            if grad:
                out.sum().backward()

        def flex_run():
            out = compiled(q, k, v, block_mask=block, enable_gqa=True)
            if grad:
                out.sum().backward()

        with torch.no_grad():  # both compute the same attention
            a = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1),
                                               v.repeat_interleave(3, 1), attn_mask=mask)
            c = compiled(q, k, v, block_mask=block, enable_gqa=True)
        real = torch.zeros(b, 1, t, 1, dtype=torch.bool, device=device)
        for i, n in enumerate(flex["lengths"].tolist()):
            real[i, :, :n] = True
        drift = ((a - c).abs() * real).max().item()
        t_sdpa, t_flex = timed(sdpa, args.repeats), timed(flex_run, args.repeats)
        case = {"tokens": t, "batch": b, "pass": "forward+backward" if grad else "forward", "blocks_skipped": round(block.sparsity() / 100, 3),
                "visible_share": round(mask.float().mean().item(), 3),
                "sdpa_ms": round(1000 * t_sdpa, 2), "flex_ms": round(1000 * t_flex, 2),
                "flex_over_sdpa_time": round(t_flex / t_sdpa, 3), "max_abs_diff": drift}
        results["cases"].append(case)
        print(json.dumps(case), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
