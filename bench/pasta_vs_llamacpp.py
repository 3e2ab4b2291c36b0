"""A kept PASTA model at batch 1 on one engine against the Baseline-SFT on llama.cpp's own
sequential loop: content tokens per second, the same prompts, the same CPU, one run.

Per prompt (greedy, each model's generation_config):
- PASTA: the model decodes its answer on `--engine` (its own promises, solm's runtime); the
  answer is then replayed on its parallel schedule, timed; content tokens = the answer's
  tokens that are not tags.
- Baseline: the Baseline-SFT decodes its answer sequentially (solm's runtime on llama.cpp, to
  learn its length n); llama.cpp's own loop (`OwnLoop`: C-level decode, argmax sampler)
  then generates n tokens from the same prompt, timed. The own loop samples argmax without
  the repetition penalty, so its tokens may differ; a pass costs the same whichever token.
The widths of PASTA's passes (tokens fed in each, tags included) and each pass's seconds are
recorded from one more replay (not counted in the ratio): the median pass of each width
inside the decode, beside the own loop's token, says where the time goes, and a pass cost
curve (`solm bench step`) can say what the schedule would cost on another step.
Both sides are warmed on the first prompt, then each prompt's sides are timed `--repeats`
times in alternating order and the fastest kept (interference only adds time). Prefill is
excluded from both. Ratio per prompt = PASTA content tokens/s over the baseline's; the
geometric mean with a 95% bootstrap interval over prompts.

    python bench/pasta_vs_llamacpp.py -p alpaca_eval.jsonl --limit 16 \
        -o bench/results/engine_step/vs_llamacpp.json   # pasta-bonbon-overlap-cpu, llama.cpp q4_0

Run it on a quiet machine: it times.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-p", "--prompts", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=16)
    ap.add_argument("--pasta-model", default="pasta-bonbon-overlap-cpu")
    ap.add_argument("--baseline-model", default="baseline-sft-cpu")
    ap.add_argument("--engine", default="llama.cpp",
                    help="PASTA's engine (llama.cpp decodes overlap-layout models only)")
    ap.add_argument("--onnx-type", default="i8")
    ap.add_argument("--gguf-type", default="q4_0", help="PASTA's GGUF on --engine llama.cpp")
    ap.add_argument("--baseline-gguf-type", default="q4_0",
                    help="the baseline's GGUF (q4_0: llama.cpp's fastest one-token pass here)")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("-o", "--out", type=Path, required=True)
    return ap.parse_args()


def decode_config(model: str, max_new_tokens: int, mode: str):
    from solm.cli.flags import decode_flags
    from solm.core.generation import resolve_decode
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.config import PastaDecodeConfig

    decoding = resolve_decode(model, decode_flags(None, None, None, None))
    return PastaDecodeConfig(mode=mode, max_new_tokens=max_new_tokens,
                             sampling=SamplingConfig(**decoding.values))


class WidthRecorder:
    """A runtime's step that records how many tokens each decode pass feeds and the seconds
    it took (prefill not counted), and otherwise is the step it wraps."""

    def __init__(self, step):
        self.step, self.widths, self.seconds = step, [], []

    def __call__(self, tokens, attrs, prefill: bool = False):
        t0 = time.perf_counter()
        logits = self.step(tokens, attrs, prefill=prefill)
        if not prefill:
            self.widths.append(len(tokens))
            self.seconds.append(time.perf_counter() - t0)
        return logits

    def __getattr__(self, name):
        return getattr(self.step, name)


def replay_passes(runtime, prompt_ids, answer_ids) -> tuple[list[int], list[float]]:
    """Tokens fed by each pass of `answer_ids` replayed on its parallel schedule, and each
    pass's seconds."""
    step = runtime.forward
    runtime.forward = recorder = WidthRecorder(step)
    try:
        runtime.replay(prompt_ids, answer_ids, mode="parallel")
    finally:
        runtime.forward = step
    return recorder.widths, recorder.seconds


def main() -> None:
    from solm.core.chat import prompt_ids
    from solm.core.jsonl import read_jsonl
    from solm.core.systems.pasta import content_ids
    from solm.engines.bandwidth import cpu_description
    from solm.decode.pasta.system import runtime_on_engine
    from solm.engines import get_engine

    args = parse()
    rows = list(read_jsonl(args.prompts))[:args.limit]
    prompts = [r.get("instruction") or r.get("prompt") for r in rows]
    pool = max(1024, 4 * args.max_new_tokens)
    prt, psettings = runtime_on_engine(args.pasta_model, "parallel", args.engine,
                                       args.gguf_type, "auto", None, pool,
                                       onnx_type=args.onnx_type)
    brt, bsettings = runtime_on_engine(args.baseline_model, "sequential", "llama.cpp",
                                       args.baseline_gguf_type, "auto", None, pool)
    own = get_engine("llama.cpp").sequential_loop(bsettings, pool)
    pcfg = decode_config(args.pasta_model, args.max_new_tokens, "parallel")
    bcfg = decode_config(args.baseline_model, args.max_new_tokens, "sequential")
    results = []
    for i, prompt in enumerate(prompts):
        pids, bids = prompt_ids(prt.tokenizer, prompt), prompt_ids(brt.tokenizer, prompt)
        answer = prt.generate(pids, pcfg)
        content = content_ids(answer.ids, prt.vocab)
        base = brt.generate(bids, bcfg)
        n_base = len(content_ids(base.ids, brt.vocab))

        def pasta_s() -> float:
            return prt.replay(pids, answer.ids, mode="parallel").decode_s

        def base_s() -> float:
            return own.generate(bids, max(1, n_base))[2]

        if i == 0:
            pasta_s(), base_s()  # first-call allocations, not timed
        times = {"pasta": [], "baseline": []}
        for k in range(args.repeats):
            for side in (("pasta", "baseline") if k % 2 == 0 else ("baseline", "pasta")):
                times[side].append(pasta_s() if side == "pasta" else base_s())
        p_rate = len(content) / min(times["pasta"])
        b_rate = n_base / min(times["baseline"])
        widths, pass_s = replay_passes(prt, pids, answer.ids)
        results.append({"prompt": prompt, "pasta_content_tokens": len(content),
                        "pasta_passes": answer.forward_passes, "pasta_flags": answer.flags,
                        "pasta_pass_widths": widths,
                        "pasta_pass_ms": [round(x * 1e3, 3) for x in pass_s],
                        "baseline_content_tokens": n_base, "times_s": times,
                        "pasta_tokens_per_s": p_rate, "baseline_tokens_per_s": b_rate,
                        "ratio": p_rate / b_rate})
        print(f"{i + 1}/{len(prompts)}: PASTA {len(content)} tokens in "
              f"{answer.forward_passes} passes, {p_rate:.1f}/s; baseline {n_base} tokens, "
              f"{b_rate:.1f}/s; ratio {p_rate / b_rate:.2f}", flush=True)
        summary = summarize(results, args, psettings.engine, cpu_description(),
                            {"pasta": asdict(pcfg.sampling), "baseline": asdict(bcfg.sampling)})
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")  # as it goes
    own.close()
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))


def summarize(results: list[dict], args: argparse.Namespace, engine: str, cpu: str,
              sampling: dict) -> dict:
    """The run's figures over the prompts timed so far, and their rows; `sampling`: each
    side's decoding settings (from its model's generation_config)."""
    from solm.core.stats import bootstrap_geomean_ci, geomean

    ratios = [r["ratio"] for r in results]
    return {
        "cpu": cpu, "date": time.strftime("%Y-%m-%d"),
        "pasta": {"model": args.pasta_model, "engine": engine,
                  "format": args.onnx_type if engine == "onnxruntime" else args.gguf_type},
        "baseline": {"model": args.baseline_model, "engine": "llama.cpp's own loop",
                     "format": args.baseline_gguf_type},
        "sampling": sampling,
        "prompts": len(results), "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
        "ratio_geomean": geomean(ratios), "ratio_ci95": bootstrap_geomean_ci(ratios),
        "pasta_content_tokens": sum(r["pasta_content_tokens"] for r in results),
        "baseline_content_tokens": sum(r["baseline_content_tokens"] for r in results),
        "pasta_width_histogram": width_histogram(results),
        "pasta_pass_ms_by_width": ms_by_width(results),
        "baseline_ms_per_token": 1e3 * sum(min(r["times_s"]["baseline"]) for r in results)
        / sum(r["baseline_content_tokens"] for r in results),
        "pasta_tokens_per_s_pooled": sum(r["pasta_content_tokens"] for r in results)
        / sum(min(r["times_s"]["pasta"]) for r in results),
        "baseline_tokens_per_s_pooled": sum(r["baseline_content_tokens"] for r in results)
        / sum(min(r["times_s"]["baseline"]) for r in results),
        "rows": results,
    }


def width_histogram(results: list[dict]) -> dict[int, int]:
    """Passes by tokens fed, over every prompt."""
    from collections import Counter

    return dict(sorted(Counter(w for r in results for w in r["pasta_pass_widths"]).items()))


def ms_by_width(results: list[dict]) -> dict[int, float]:
    """The median milliseconds of a pass of each width, over every prompt's passes."""
    import statistics

    by: dict[int, list[float]] = {}
    for r in results:
        for w, ms in zip(r["pasta_pass_widths"], r["pasta_pass_ms"]):
            by.setdefault(w, []).append(ms)
    return {w: statistics.median(v) for w, v in sorted(by.items())}


if __name__ == "__main__":
    main()

