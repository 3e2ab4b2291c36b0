"""How llama.cpp's pass cost depends on a stream's holes: 8 sequences in their own streams,
each holding `--live` tokens, laid out (a) contiguous (dense's layout at that length),
(b) after `--fed` tokens with the rest removed in page-sized holes (TIP's layout: the same
live tokens, spread over a longer cell range), (c) (b) after each stream is compacted through
llama_state_seq_get_data / set_data. Times `--steps` one-token-per-sequence passes each,
median, quiet CPU assumed."""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time

from solm.engines.llamacpp.binding import LlamaContext, Token


def fill(ctx, seqs, fed, live, page, hole_pages):
    for s in range(seqs):
        ctx.decode([Token(1 + i % 1000, i, s, logits=False) for i in range(fed)])
    if fed > live:  # remove whole pages spread evenly over the first part of the stream
        remove, p = fed - live, page
        while remove > 0:
            n = min(page, remove)
            for s in range(seqs):
                ctx.seq_rm(s, p, p + n)
            remove -= n
            p += page * hole_pages


def compact(ctx, seqs):
    L = ctx.L
    blobs = []
    for s in range(seqs):
        size = L.llama_state_seq_get_size(ctx.ctx, s)
        buf = (ctypes.c_uint8 * size)()
        L.llama_state_seq_get_data(ctx.ctx, buf, size, s)
        blobs.append(buf)
        ctx.seq_rm(s)
    for s, buf in enumerate(blobs):
        if L.llama_state_seq_set_data(ctx.ctx, buf, len(buf), s) == 0:
            raise RuntimeError("set_data failed")


def time_steps(ctx, seqs, start, steps):
    times = []
    for i in range(steps):
        t = time.perf_counter()
        ctx.decode([Token(7, start + i, s) for s in range(seqs)])
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--fed", type=int, default=2000)
    ap.add_argument("--live", type=int, default=1500)
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--hole-pages", type=int, default=3, help="a hole every n pages")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--flash", action="store_true")
    a = ap.parse_args()
    cells = a.seqs * (a.fed + a.steps + 64)
    out = {"args": vars(a)}
    for name, fed, live, do_compact in (("dense_live", a.live, a.live, False),
                                        ("dense_fed", a.fed, a.fed, False),
                                        ("holes", a.fed, a.live, False),
                                        ("holes_compacted", a.fed, a.live, True)):
        ctx = LlamaContext(a.gguf, n_ctx=cells, n_seq=a.seqs, unified=False,
                           flash_attn=a.flash)
        fill(ctx, a.seqs, fed, live, a.page, a.hole_pages)
        t = time.perf_counter()
        if do_compact:
            compact(ctx, a.seqs)
        out[name + "_compact_ms"] = 1000 * (time.perf_counter() - t)
        out[name] = time_steps(ctx, a.seqs, fed, a.steps)
        ctx.close()
        print(name, round(out[name], 2), "ms a pass", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
