"""The llama.cpp engine against llama.cpp's own generation and solm's torch engine, side by
side in one run on one CPU.

    python bench/llamacpp_speed.py [--model smollm2-135m] [--gguf-type q8_0]
        [--max-new-tokens 128] [--prompts 8] [--batch-sizes 1,4,8,16]
        [--out bench/results/llamacpp_speed.json]

Greedy, sequential decoding of built-in instructions (bench/batched_decode.py's), the model
with PASTA's control tokens (what `pasta decode` loads), every engine warmed before it is
timed:

1. llama.cpp's own generation: a minimal loop of `llama_decode` (one token) and llama.cpp's
   greedy sampler, on the GGUF solm exported (the floor any engine on llama.cpp pays);
2. solm on llama.cpp, one prompt at a time (`pasta decode --engine llama.cpp
   --batch-size 1`): solm's rules, sampler and continuous batching around the same calls;
3. solm's torch engine, one prompt at a time, its best step (compiled, dtype auto);
4. the batched curve: the same prompts decoded by each engine with continuous batching at
   each batch size (all requests' tokens in one pass a step).

Tokens/s count the tokens decoded after the prompt (decode time only: prefill apart).
Time it on a quiet CPU; the figures name the CPU.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from batched_decode import PROMPTS


def cpu_name() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def llama_own(gguf: str, prompts: list[list[int]], new: int, threads: int) -> dict:
    """llama.cpp's own loop: decode one token, sample greedily in C, repeat."""
    from solm.engines.llamacpp.binding import LlamaContext
    from solm.engines.llamacpp.own_loop import OwnLoop

    ctx = LlamaContext(gguf, n_ctx=2048, n_seq=1, threads=threads)
    loop = OwnLoop(ctx)
    tokens, seconds = 0, 0.0
    for i, ids in enumerate([prompts[0]] + prompts):  # the first decode warms up
        _, _, decode_s = loop.generate(ids, new)
        if i:
            seconds += decode_s
            tokens += new
    loop.close()
    ctx.close()
    return {"tokens": tokens, "decode_s": round(seconds, 3), "tokens_per_s": tokens / seconds}


def solm_batched(model, tok, prompts, new: int, batch: int, forward) -> dict:
    """solm's continuous batching (either engine's forward): tokens/s over the run's wall
    time after the prompts' prefills."""
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.batched import BatchedPastaRuntime
    from solm.decode.pasta.runtime import PastaDecodeConfig

    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=new,
                            sampling=SamplingConfig(temperature=0.0))
    rt = BatchedPastaRuntime(model, tok, pool_size=batch * (new + 256), max_batch=batch,
                             forward=forward() if forward else None)
    rt.generate_many(prompts[:batch], PastaDecodeConfig(
        mode="sequential", max_new_tokens=8, sampling=cfg.sampling))  # warm
    t0 = time.perf_counter()
    results = rt.generate_many(prompts, cfg)
    wall = time.perf_counter() - t0
    prefill = sum(r.prefill_s for r in results)
    tokens = sum(len(r.ids) for r in results)
    decode = wall - prefill if batch == 1 else wall
    return {"batch": batch, "tokens": tokens, "wall_s": round(wall, 3),
            "decode_s": round(decode, 3), "tokens_per_s": tokens / decode,
            "steps": rt.steps, "answers": [r.ids for r in results]}


def torch_solo(model, tok, prompts, new: int) -> dict:
    """solm's torch engine one prompt at a time, compiled steps (the default for long jobs)."""
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime

    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=new,
                            sampling=SamplingConfig(temperature=0.0))
    rt = PastaRuntime(model, tok, pool_size=new + 512, compile=True)
    rt.generate(prompts[0], cfg)  # builds the graphs
    tokens, seconds = 0, 0.0
    answers = []
    for ids in prompts:
        r = rt.generate(ids, cfg)
        tokens += len(r.ids)
        seconds += r.decode_s
        answers.append(r.ids)
    return {"tokens": tokens, "decode_s": round(seconds, 3), "tokens_per_s": tokens / seconds,
            "answers": answers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--gguf-type", default="q8_0")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--batch-sizes", default="1,4,8,16")
    ap.add_argument("--out", default="bench/results/llamacpp_speed.json")
    args = ap.parse_args()

    import torch

    from solm.core.chat import prompt_ids
    from solm.core.models import load_decoder
    from solm.engines.llamacpp.binding import LlamaContext
    from solm.engines.llamacpp.model import gguf_for
    from solm.engines.llamacpp.step import LlamaCppStep

    threads = torch.get_num_threads()
    fp32 = load_decoder(args.model, dtype="fp32", device="cpu", system="pasta")
    gguf = str(gguf_for(args.model, args.gguf_type, "pasta", loaded=fp32))
    model, tok = load_decoder(args.model, dtype="auto", device="cpu", system="pasta")
    texts = (PROMPTS * 4)[:max(args.prompts, 16)]
    prompts = [prompt_ids(tok, t) for t in texts]
    few = prompts[:args.prompts]
    new = args.max_new_tokens
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    out: dict = {"cpu": cpu_name(), "threads": threads, "model": args.model,
                 "gguf_type": args.gguf_type, "torch_dtype": str(model.dtype),
                 "max_new_tokens": new, "prompts_solo": len(few)}
    print(f"{out['cpu']}, {threads} threads; {args.model} ({args.gguf_type} GGUF, torch "
          f"{model.dtype})", flush=True)
    own = llama_own(gguf, few, new, threads)
    print(f"llama.cpp own loop: {own['tokens_per_s']:.1f} tok/s", flush=True)

    def llama_step(batch: int):
        return lambda: LlamaCppStep(LlamaContext(gguf, n_ctx=batch * (new + 256),
                                                 n_seq=2 * batch, threads=threads))

    ours = solm_batched(fp32[0], tok, few, new, 1, llama_step(1))
    print(f"solm on llama.cpp, batch 1: {ours['tokens_per_s']:.1f} tok/s", flush=True)
    solo = torch_solo(model, tok, few, new)
    print(f"solm torch, batch 1 (compiled): {solo['tokens_per_s']:.1f} tok/s", flush=True)
    curve = {"llama.cpp": [], "torch": []}
    for b in sizes:
        for engine in ("llama.cpp", "torch"):
            r = solm_batched(fp32[0] if engine == "llama.cpp" else model, tok, prompts[:16],
                             new, b, llama_step(b) if engine == "llama.cpp" else None)
            curve[engine].append({k: v for k, v in r.items() if k != "answers"})
            print(f"  {engine} batch {b}: {r['tokens_per_s']:.1f} tok/s ({r['steps']} steps)",
                  flush=True)
    same = sum(a == b for a, b in zip(ours["answers"], solo["answers"]))
    out.update(
        llama_own=own, solm_llama_batch1={k: v for k, v in ours.items() if k != "answers"},
        solm_torch_batch1={k: v for k, v in solo.items() if k != "answers"}, curve=curve,
        ratio_vs_llama_own=ours["tokens_per_s"] / own["tokens_per_s"],
        ratio_vs_torch=ours["tokens_per_s"] / solo["tokens_per_s"],
        batch16_vs_batch1={e: (c[-1]["tokens_per_s"] / c[0]["tokens_per_s"]) for e, c in
                           curve.items() if len(c) > 1},
        answers_equal_to_torch=f"{same} of {len(few)} (greedy; {args.gguf_type} weights "
                               f"against torch {model.dtype}: near-ties may part them)")
    print(json.dumps({k: out[k] for k in ("ratio_vs_llama_own", "ratio_vs_torch",
                                          "batch16_vs_batch1")}, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    plot(curve, sizes, out, Path(args.out).with_suffix(".png"))


def plot(curve: dict, sizes: list[int], out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for engine, rows in curve.items():
        ax.plot(sizes, [r["tokens_per_s"] for r in rows], marker="o", label=f"solm, {engine}")
    ax.axhline(out["llama_own"]["tokens_per_s"], color="grey", ls="--",
               label="llama.cpp's own loop, 1 request")
    ax.set_xlabel("requests decoded together")
    ax.set_ylabel("tokens / s (all requests)")
    ax.set_xticks(sizes)
    ax.set_title(f"{out['model']} ({out['gguf_type']}), {out['threads']} threads\n{out['cpu']}",
                 fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
