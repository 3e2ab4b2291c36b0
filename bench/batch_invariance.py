"""Which parts of a decode step give a row the same result whatever its batch mates, here.

    python bench/batch_invariance.py [--model smollm2-135m] [--dtype auto] [--max-rows 64]
        [--out FILE.json]

A batched decode equals one-at-a-time decoding token for token only if every op computes a
request's rows the same way whatever else is in the pass. For each distinct linear layer of
the model (its real weights, activations of a realistic scale) this finds the row counts M
at which `linear(x[:M])` differs from the rows computed one at a time, and times M = 1, 16,
64 with and without oneDNN (the only bf16 GEMM that does not depend on M here is the one
without oneDNN, measured several times slower). Attention is checked the way `SlotStep`
calls it (each request over its own slots) against one masked call over a shared pool.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def rows_that_differ(weight: torch.Tensor, x: torch.Tensor) -> list[int]:
    solo = torch.cat([F.linear(x[j:j + 1], weight) for j in range(len(x))])
    return [m for m in range(2, len(x) + 1) if not torch.equal(F.linear(x[:m], weight), solo[:m])]


def per_call_us(weight: torch.Tensor, x: torch.Tensor, repeats: int = 50) -> float:
    F.linear(x, weight)
    t0 = time.perf_counter()
    for _ in range(repeats):
        F.linear(x, weight)
    return round((time.perf_counter() - t0) / repeats * 1e6, 1)


def attention_check(dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int) -> dict:
    """One request's rows: its own keys (a SlotStep segment) vs the same keys at an offset of a
    larger pool under one mask (the layout a single masked call over many requests reads)."""
    from solm.engines.reads import Segment
    from solm.engines.torch.attention import segmented_attention

    torch.manual_seed(0)
    n, rows, total, offset = 300, 4, 4096, 500
    q = torch.randn(1, heads, rows, head_dim, dtype=dtype)
    k = torch.randn(1, kv_heads, n, head_dim, dtype=dtype)
    v = torch.randn(1, kv_heads, n, head_dim, dtype=dtype)
    mask = torch.ones(rows, n, dtype=torch.bool)
    solo = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None], enable_gqa=True)
    pool_k = torch.zeros(1, kv_heads, total, head_dim, dtype=dtype)
    pool_v = torch.zeros_like(pool_k)
    pool_k[:, :, offset:offset + n], pool_v[:, :, offset:offset + n] = k, v
    seg = segmented_attention(q, pool_k, pool_v, [Segment(rows, ((offset, offset + n),), mask)])
    wide = torch.zeros(rows, total, dtype=torch.bool)
    wide[:, offset:offset + n] = True
    one = F.scaled_dot_product_attention(q, pool_k, pool_v, attn_mask=wide[None, None],
                                         enable_gqa=True)
    return {"segment_equals_solo": torch.equal(seg, solo),
            "one_masked_call_equals_solo": torch.equal(one, solo),
            "one_masked_call_max_diff": (one.float() - solo.float()).abs().max().item()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--max-rows", type=int, default=64)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()

    from solm.core.models import load_decoder, text_config
    from solm.engines.bandwidth import cpu_description
    from solm.engines.torch.pool import kv_shape_of

    model, _ = load_decoder(args.model, dtype=args.dtype)
    dtype = next(model.parameters()).dtype
    shapes: dict[tuple[int, int], torch.Tensor] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            shapes.setdefault(tuple(module.weight.shape), module.weight.detach())
    torch.manual_seed(0)
    linears = []
    for (out_f, in_f), weight in sorted(shapes.items()):
        x = (torch.randn(args.max_rows, in_f) * 3).to(dtype)
        entry = {"in": in_f, "out": out_f}
        for onednn in (True, False):
            torch.backends.mkldnn.enabled = onednn
            key = "onednn" if onednn else "without_onednn"
            bad = rows_that_differ(weight, x)
            entry[key] = {"rows_that_differ_from_one_at_a_time":
                          f"{bad[0]}..{bad[-1]} ({len(bad)} counts)" if bad else "none",
                          **{f"us_M{m}": per_call_us(weight, x[:m]) for m in (1, 16, 64)}}
        torch.backends.mkldnn.enabled = True
        linears.append(entry)
        print(json.dumps(entry))
    heads = text_config(model).num_attention_heads
    kv_heads, head_dim = kv_shape_of(model)
    attention = attention_check(dtype, heads, kv_heads, head_dim)
    print(json.dumps(attention))
    report = {"model": args.model, "dtype": str(dtype), "cpu": cpu_description(),
              "threads": torch.get_num_threads(), "linear": linears, "attention": attention}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
