"""Decoding at GPU speed, measured in one run of under 8 minutes on one GPU.

    python bench/gpu_decode.py --tokenizer DIR --out gpu_decode.json \\
        [--pasta-answers FILE] [--tip-traces FILE] [--budget-s 420]

Three sections, each row printed and written to `--out` as it finishes (a run cut short
keeps what it measured; rows the time budget leaves out are listed as skipped):

1. **sequential**: tokens/s of solm's batched runtime in sequential mode (`--compile`: the
   device step, one upload a pass, CUDA graphs per row bucket built before the decode,
   sampling on the device) against `model.generate` with a static cache (which transformers
   compiles, CUDA graphs included), both sampling at temperature 0.6 and top-p 0.95 from the
   logits, for a random model of the embedded model's shape (SmolLM2-135M) and one of
   Llama-3.2-1B's: short prompts (64 tokens) at batch 1, 8, 32 and 64, prompts of about 2K
   and 8K tokens at batch 1 and 8. Each point is timed three times in alternating order
   (solm, generate, generate, solm, solm, generate): the fastest and the spread. On CUDA
   the row also counts the host syncs per pass (`torch.cuda.set_sync_debug_mode`).
   `--replayed` adds teacher-forced answers beside each point.
2. **pasta**: the realized speedup of PASTA's parallel decoding over solm sequential at
   batch 1 and 8, on the kept BoNBoN model's own answers (`--pasta-answers`: a
   `solm pasta decode` JSONL of `pasta-bonbon-cpu`, `make gpu-decode-inputs`). Weights do
   not travel to an offline GPU machine, so the answers are replayed on a random model of
   the kept model's shape: the passes, widths and keys read are the kept model's, and a
   pass costs what it costs with any weights of that shape.
3. **tip**: TIP against Dense at 8K-token tracking traces (`--tip-traces`: `tip annotate`
   output, `make gpu-decode-inputs`), replayed on a random model of the embedded shape with
   register tokens, compiled, dense first then TIP, live KV beside tokens/s.

bf16 on CUDA, timed with synchronisation after a warm-up that builds every graph the timed
run uses (graph building is reported apart). The run ends with verdict lines: solm against
`generate` at each point, PASTA's realized speedup, TIP against Dense. `--device cpu
--smoke` runs every section on a tiny model for seconds (what the test suite checks); its
numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

SECTIONS = ("sequential", "pasta", "tip")


def shapes(vocab: int, smoke: bool) -> dict:
    from transformers import LlamaConfig

    if smoke:
        return {"tiny": LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2,
                                    vocab_size=vocab, max_position_embeddings=16384,
                                    tie_word_embeddings=True)}
    return {
        "smollm2-135m-shape": LlamaConfig(
            hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
            num_attention_heads=9, num_key_value_heads=3, vocab_size=vocab,
            max_position_embeddings=16384, tie_word_embeddings=True, rope_theta=100000.0),
        "llama-1b-shape": LlamaConfig(
            hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, vocab_size=max(vocab, 128_256),
            max_position_embeddings=16384, tie_word_embeddings=True, rope_theta=500000.0),
    }


class Run:
    """The rows so far, written to `out` after each; a clock against the time budget."""

    def __init__(self, out: Path | None, budget_s: float, meta: dict):
        self.out, self.budget_s, self.started = out, budget_s, time.perf_counter()
        self.summary = {**meta, "rows": [], "skipped": []}

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def add(self, row: dict) -> None:
        self.summary["rows"].append(row)
        print(json.dumps(row), flush=True)
        self.save()

    def skip(self, what: str, why: str) -> None:
        self.summary["skipped"].append({"what": what, "why": why})
        print(f"skipped {what}: {why}", flush=True)
        self.save()

    def save(self) -> None:
        self.summary["elapsed_s"] = round(time.perf_counter() - self.started, 1)
        if self.out is not None:
            self.out.write_text(json.dumps(self.summary, indent=2))


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def random_model(cfg, device: str, dtype):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(
        device, dtype).eval()


def replay_batched(model, tok, prompts, streams, mode: str, compile: bool, anchors=None):
    """A callable decoding every (prompt, answer) at once with the batched runtime, the
    answers teacher-forced (`streams`: per request, thread id -> tokens)."""
    from solm.decode.pasta.batched import BatchedPastaRuntime, BatchRequest
    from solm.decode.pasta.runtime import PastaDecodeConfig

    longest = max(sum(len(s) for s in st.values()) for st in streams)
    pool = sum(len(p) for p in prompts) + len(prompts) * (longest + 4)
    rt = BatchedPastaRuntime(model, tok, pool_size=pool, max_batch=len(prompts),
                             compile=compile)
    cfg = PastaDecodeConfig(mode=mode, max_new_tokens=longest + 2, max_fork_tokens=longest + 2)

    def run():
        return list(rt.run(BatchRequest(i, p, cfg, scripts=s,
                                        replay_anchors=frozenset(anchors[i] if anchors else ()))
                           for i, (p, s) in enumerate(zip(prompts, streams))))

    return run, rt


SAMPLED = {"temperature": 0.6, "top_p": 0.95}
ORDER = ("solm", "generate", "generate", "solm", "solm", "generate")  # 3 each, alternating


def repeated(fns: dict, device: str) -> dict:
    """Each callable timed three times in alternating order (`ORDER`): per name the fastest
    time and the spread (slowest over fastest, minus one)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for name in ORDER:
        if name in fns:
            times[name].append(timed(fns[name], device))
    return {k: (min(v), max(v) / min(v) - 1) for k, v in times.items() if v}


def sampled_batched(model, tok, prompts, new_tokens: int, compile: bool):
    """A callable decoding every prompt at once with the batched runtime in sequential mode,
    sampled (temperature 0.6, top-p 0.95, a seed per request) up to `new_tokens` each;
    returns the tokens it decoded."""
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.batched import BatchedPastaRuntime, BatchRequest
    from solm.decode.pasta.runtime import PastaDecodeConfig

    pool = sum(len(p) for p in prompts) + len(prompts) * (new_tokens + 4)
    rt = BatchedPastaRuntime(model, tok, pool_size=pool, max_batch=len(prompts),
                             compile=compile)

    def run() -> int:
        reqs = [BatchRequest(i, p, PastaDecodeConfig(
            mode="sequential", max_new_tokens=new_tokens, max_fork_tokens=new_tokens,
            sampling=SamplingConfig(seed=i, **SAMPLED))) for i, p in enumerate(prompts)]
        return sum(len(r.result.ids) for r in rt.run(reqs))

    return run, rt


def host_syncs_per_pass(fn, rt, device: str) -> float | None:
    """CUDA's sync debug mode around one run: the synchronising calls it warned about, per
    forward pass (None off CUDA)."""
    if not device.startswith("cuda"):
        return None
    import warnings

    steps = rt.steps
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return round(len(seen) / max(1, rt.steps - steps), 2)


def section_sequential(run: Run, tok, device, dtype, batches, contexts, long_batches,
                       new_tokens, smoke: bool, replayed: bool = False) -> None:
    """solm sequential, sampled (and with `replayed` also on teacher-forced answers),
    against `model.generate` with a static cache at each shape, context and batch; long
    contexts at `long_batches` only."""
    gen = torch.Generator().manual_seed(0)
    for name, cfg in shapes(len(tok), smoke).items():
        model = random_model(cfg, device, dtype)
        plain = [1000 + int(x) for x in torch.randint(0, 20000, (512,), generator=gen)]
        for context in contexts:
            for b in (batches if context == contexts[0] else long_batches):
                for sampled in (True, False) if replayed else (True,):
                    what = (f"sequential {name} context {context} batch {b} "
                            f"{'sampled' if sampled else 'replayed'}")
                    if run.left() < 30:
                        run.skip(what, "time budget")
                        continue
                    run.add(sequential_point(model, tok, device, name, plain, context, b,
                                             new_tokens, sampled, smoke))
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def sequential_point(model, tok, device, name, plain, context, b, new_tokens, sampled,
                     smoke) -> dict:
    prompts = [[plain[(i * 7 + j) % 512] for j in range(context)] for i in range(b)]
    row = {"section": "sequential", "model": name, "context": context, "batch": b,
           "new_tokens": new_tokens, "sampling": SAMPLED if sampled else "replayed"}
    fns: dict = {}
    compile = not smoke or device != "cpu"
    decoded = {"solm": b * new_tokens, "generate": b * new_tokens}
    try:
        if sampled:
            solm_run, rt = sampled_batched(model, tok, prompts, new_tokens, compile)
        else:
            answers = [{0: [plain[(i * 13 + j) % 512] for j in range(new_tokens)]}
                       for i in range(b)]
            solm_run, rt = replay_batched(model, tok, prompts, answers, "sequential", compile)
        t0 = time.perf_counter()
        out = solm_run()  # warm-up: builds every graph the timed runs replay
        row["solm_warmup_s"] = round(time.perf_counter() - t0, 2)
        if sampled:
            decoded["solm"] = out
        row["solm_graphs"] = getattr(getattr(rt.forward, "compiled", None), "compiles", 0)
        row["solm_kernel"] = getattr(rt.forward, "kernel", type(rt.forward).__name__)
        row["solm_host_syncs_per_pass"] = host_syncs_per_pass(solm_run, rt, device)
        fns["solm"] = solm_run
    except Exception as e:  # a row that fails is reported, the run goes on
        row["solm_error"] = f"{type(e).__name__}: {e}"[:400]
    try:
        ids = torch.tensor(prompts, device=device)
        how = dict(do_sample=True, **SAMPLED) if sampled else dict(do_sample=False)

        def hf_run():
            with torch.no_grad():
                model.generate(ids, attention_mask=torch.ones_like(ids),
                               max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                               pad_token_id=0, cache_implementation="static", **how)

        t0 = time.perf_counter()
        hf_run()
        hf_run()  # transformers compiles the static-cache step on its first calls
        row["generate_warmup_s"] = round(time.perf_counter() - t0, 2)
        fns["generate"] = hf_run
    except Exception as e:
        row["generate_error"] = f"{type(e).__name__}: {e}"[:400]
    try:
        for who, (fastest, spread) in repeated(fns, device).items():
            row[f"{who}_tokens_per_s"] = round(decoded[who] / fastest, 1)
            row[f"{who}_spread"] = round(spread, 3)
    except Exception as e:
        row["timing_error"] = f"{type(e).__name__}: {e}"[:400]
    if "solm_tokens_per_s" in row and "generate_tokens_per_s" in row:
        row["solm_over_generate"] = round(row["solm_tokens_per_s"]
                                          / row["generate_tokens_per_s"], 3)
    return row


def verdicts(rows: list[dict]) -> list[str]:
    """One line per question the run answers: where solm sequential stands against
    `generate` (sampled, every context), PASTA's realized speedup, TIP against Dense."""
    out = []
    for r in rows:
        if r["section"] == "sequential" and "solm_over_generate" in r:
            how = "sampled" if r["sampling"] != "replayed" else "replayed"
            word = "faster than" if r["solm_over_generate"] >= 1 else "slower than"
            out.append(f"{r['model']} context {r['context']} batch {r['batch']} {how}: solm "
                       f"{r['solm_over_generate']:.2f}x generate ({word}; spreads "
                       f"{r['solm_spread']:.0%} / {r['generate_spread']:.0%})")
        elif r["section"] == "pasta" and "realized_speedup" in r:
            out.append(f"PASTA batch {r['batch']}: realized {r['realized_speedup']:.2f}x "
                       "over solm sequential on the same answers")
        elif r["section"] == "tip" and "tip_over_dense" in r:
            out.append(f"TIP: {r['tip_over_dense']:.2f}x Dense's tokens/s at "
                       f"{r['live_kv_vs_dense']:.2f}x its live KV")
    return out


def section_pasta(run: Run, tok, device, dtype, answers_file: Path, batches, limit: int,
                  smoke: bool) -> None:
    from solm.core.chat import messages_ids, text_ids
    from solm.core.systems.pasta import PastaVocab
    from solm.decode.pasta.runtime import replay_scripts

    rows = [json.loads(line) for line in answers_file.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if (r.get("annotated") or r.get("response"))][:limit]
    vocab = PastaVocab.from_tokenizer(tok)
    cfg = next(iter(shapes(len(tok), smoke).values()))
    model = random_model(cfg, device, dtype)
    traces = []
    for r in rows:
        prompt = messages_ids(tok, [{"role": "user", "content": r["prompt"]}])
        response = text_ids(tok, r.get("annotated") or r["response"])
        streams, anchors = replay_scripts(response, vocab)
        traces.append((prompt, response, streams, anchors))
    for b in batches:
        what = f"pasta batch {b}"
        if run.left() < 30:
            run.skip(what, "time budget")
            continue
        row = {"section": "pasta", "batch": b, "answers": len(traces)}
        try:
            times = {}
            for mode in ("sequential", "parallel"):
                total = 0.0
                for at in range(0, len(traces), b):
                    group = traces[at:at + b]
                    prompts = [p for p, _, _, _ in group]
                    if mode == "parallel":
                        streams = [s for _, _, s, _ in group]
                        anchors = [a for _, _, _, a in group]
                    else:
                        streams, anchors = [{0: resp} for _, resp, _, _ in group], None
                    fn, _ = replay_batched(model, tok, prompts, streams, mode,
                                           compile=not smoke or device != "cpu",
                                           anchors=anchors)
                    fn()  # warm-up (graphs)
                    total += timed(fn, device)
                times[mode] = total
            tokens = sum(len(resp) for _, resp, _, _ in traces)
            row.update(sequential_tokens_per_s=round(tokens / times["sequential"], 1),
                       parallel_tokens_per_s=round(tokens / times["parallel"], 1),
                       realized_speedup=round(times["sequential"] / times["parallel"], 3))
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:400]
        run.add(row)


def section_tip(run: Run, tok_dir: str, device, dtype, traces_file: Path, limit: int,
                max_tokens: int, smoke: bool) -> None:
    from solm.core.chat import prompt_ids, text_ids
    from solm.core.models import load_tokenizer
    from solm.core.vocabulary import add_control_tokens
    from solm.decode.tip.runtime import TipRuntime
    from solm.eval.tip_bench import pages_needed, read_trace_rows, run_tip_bench

    registers = 2
    tok = load_tokenizer(tok_dir)
    add_control_tokens(None, tok, "tip", num_registers=registers)
    rows = read_trace_rows(traces_file, limit)
    pairs = [(prompt_ids(tok, r["prompt"]),
              text_ids(tok, r.get("annotated") or r["response"])[:max_tokens]) for r in rows]
    if run.left() < 60:
        run.skip("tip", "time budget")
        return
    cfg = next(iter(shapes(len(tok), smoke).values()))
    model = random_model(cfg, device, dtype)
    page = 16
    rt = TipRuntime(model, tok, num_pages=pages_needed(pairs, page, len(pairs), registers),
                    page_size=page, num_registers=registers,
                    compile=not smoke or device != "cpu")
    row = {"section": "tip", "traces": len(pairs),
           "mean_trace_tokens": round(sum(len(r) for _, r in pairs) / len(pairs))}
    try:
        summary = run_tip_bench(rt, pairs, ["dense", "tip"], 0, len(pairs), "torch")
        for p in summary["policies"]:
            row[f"{p['policy']}_tokens_per_s"] = round(p["throughput_tok_s"], 1)
            row[f"{p['policy']}_live_tokens"] = round(p["mean_live_tokens"], 1)
        row["tip_over_dense"] = round(summary["throughput_vs_dense"], 3)
        row["live_kv_vs_dense"] = round(summary["live_kv_vs_dense"], 3)
        row["compile_s"] = round(rt.compile_s, 1)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"[:400]
    run.add(row)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="a Hugging Face tokenizer folder")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--pasta-batches", default="1,8")
    ap.add_argument("--contexts", default="64,2048,8192",
                    help="prompt lengths: the first at every --batches, the rest at "
                         "--long-batches")
    ap.add_argument("--long-batches", default="1,8")
    ap.add_argument("--replayed", action="store_true",
                    help="also time teacher-forced answers beside each sampled point")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--pasta-answers", type=Path, default=None)
    ap.add_argument("--pasta-limit", type=int, default=16)
    ap.add_argument("--tip-traces", type=Path, default=None)
    ap.add_argument("--tip-limit", type=int, default=4)
    ap.add_argument("--tip-max-tokens", type=int, default=8192)
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="start no row after this many seconds")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes and token counts")
    args = ap.parse_args(argv)
    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here (use --device cpu --smoke to check the script)")
    from solm.core.models import load_tokenizer
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer(args.tokenizer)
    add_control_tokens(None, tok, "pasta")
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    run = Run(args.out, args.budget_s, {"device": gpu, "torch": torch.__version__,
                                        "date": time.strftime("%Y-%m-%d"),
                                        "command": "python bench/gpu_decode.py " + " ".join(
                                            sys.argv[1:] if argv is None else argv)})
    sections = args.sections.split(",")
    batches = [int(x) for x in args.batches.split(",")]
    if "sequential" in sections:
        section_sequential(run, tok, device, dtype, batches,
                           [int(x) for x in args.contexts.split(",")],
                           [int(x) for x in args.long_batches.split(",")],
                           args.new_tokens, args.smoke, args.replayed)
    if "pasta" in sections:
        if args.pasta_answers is None:
            run.skip("pasta", "no --pasta-answers")
        else:
            section_pasta(run, tok, device, dtype, args.pasta_answers,
                          [int(x) for x in args.pasta_batches.split(",")], args.pasta_limit,
                          args.smoke)
    if "tip" in sections:
        if args.tip_traces is None:
            run.skip("tip", "no --tip-traces")
        else:
            section_tip(run, args.tokenizer, device, dtype, args.tip_traces, args.tip_limit,
                        args.tip_max_tokens, args.smoke)
    run.summary["verdicts"] = verdicts(run.summary["rows"])
    for line in run.summary["verdicts"]:
        print("verdict:", line, flush=True)
    run.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
