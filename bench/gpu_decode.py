"""Decoding at GPU speed, measured in one run of under 8 minutes on one GPU.

    python bench/gpu_decode.py --tokenizer DIR --out gpu_decode.json \\
        [--pasta-answers FILE] [--tip-traces FILE] [--budget-s 420]

Three sections, each row printed and written to `--out` as it finishes (a run cut short
keeps what it measured; rows the time budget leaves out are listed as skipped):

1. **sequential**: tokens/s of solm's batched runtime in sequential mode (`--compile`: CUDA
   graphs per shape bucket over the all-tensor step, sampling on the device) against
   `model.generate` with a static cache (which transformers compiles, CUDA graphs included),
   at batch 1, 8, 32 and 64, for a random model of the embedded model's shape (SmolLM2-135M)
   and one of Llama-3.2-1B's. Both teacher-force the same number of tokens (solm replays
   fixed answers; `generate` gets `min_new_tokens`), so neither stops early.
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
run uses (graph building is reported apart). `--device cpu --smoke` runs every section on a
tiny model for seconds (what the test suite checks); its numbers mean nothing.
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


def section_sequential(run: Run, tok, device, dtype, batches, prompt_tokens, new_tokens,
                       smoke: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    for name, cfg in shapes(len(tok), smoke).items():
        model = random_model(cfg, device, dtype)
        plain = [1000 + int(x) for x in torch.randint(0, 20000, (512,), generator=gen)]
        for b in batches:
            what = f"sequential {name} batch {b}"
            if run.left() < 30:
                run.skip(what, "time budget")
                continue
            prompts = [[plain[(i * 7 + j) % 512] for j in range(prompt_tokens)]
                       for i in range(b)]
            answers = [{0: [plain[(i * 13 + j) % 512] for j in range(new_tokens)]}
                       for i in range(b)]
            row = {"section": "sequential", "model": name, "batch": b, "new_tokens": new_tokens}
            try:
                solm_run, rt = replay_batched(model, tok, prompts, answers, "sequential",
                                              compile=not smoke or device != "cpu")
                t0 = time.perf_counter()
                solm_run()  # warm-up: builds every graph the timed run replays
                row["solm_warmup_s"] = round(time.perf_counter() - t0, 2)
                s = timed(solm_run, device)
                row["solm_tokens_per_s"] = round(b * new_tokens / s, 1)
                row["solm_graphs"] = getattr(rt.forward.compiled, "compiles", 0)
            except Exception as e:  # a row that fails is reported, the run goes on
                row["solm_error"] = f"{type(e).__name__}: {e}"[:400]
            try:
                ids = torch.tensor(prompts, device=device)

                def hf_run():
                    with torch.no_grad():
                        model.generate(ids, attention_mask=torch.ones_like(ids),
                                       max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                       do_sample=False, pad_token_id=0,
                                       cache_implementation="static")

                t0 = time.perf_counter()
                hf_run()
                hf_run()  # transformers compiles the static-cache step on its first calls
                row["generate_warmup_s"] = round(time.perf_counter() - t0, 2)
                h = timed(hf_run, device)
                row["generate_tokens_per_s"] = round(b * new_tokens / h, 1)
            except Exception as e:
                row["generate_error"] = f"{type(e).__name__}: {e}"[:400]
            if "solm_tokens_per_s" in row and "generate_tokens_per_s" in row:
                row["solm_over_generate"] = round(row["solm_tokens_per_s"]
                                                  / row["generate_tokens_per_s"], 3)
            run.add(row)
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


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
    ap.add_argument("--prompt-tokens", type=int, default=64)
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
        section_sequential(run, tok, device, dtype, batches, args.prompt_tokens,
                           args.new_tokens, args.smoke)
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
    run.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
