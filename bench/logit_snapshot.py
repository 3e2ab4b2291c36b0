"""Record, then compare, the logits the runtimes produce on fixed rows (refactor guard).

    python bench/logit_snapshot.py record --out runs/snap/before.safetensors --bench-rows R.jsonl
    python bench/logit_snapshot.py compare runs/snap/before.safetensors runs/snap/after.safetensors

`record` replays, with the embedded model in fp32 and teacher forcing:
- PASTA: the built-in demo rows and the first `--rows` rows of a `pasta annotate` output that
  `pasta bench`'s README run selects (>= 2 promises, <= 400 plain tokens), in parallel and
  sequential mode;
- TIP: `--tip-traces` synthetic register traces under every eviction policy.
It stores every recorded logit row (safetensors) with the replayed ids. `compare` prints the
max abs difference per key and exits non-zero above `--tol` (1e-5) or on any missing key.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[1]


def pasta_rows(bench_rows: Path | None, n: int, tok) -> list[dict]:
    from solm.core.chat import text_ids
    from solm.core.jsonl import read_jsonl
    from solm.core.pasta_lang import promises, strip

    rows = list(read_jsonl(ROOT / "solm" / "eval" / "demo_annotated.jsonl"))
    if bench_rows is not None:
        chosen = []
        for row in read_jsonl(bench_rows):
            text = row.get("annotated")
            if not text or len(promises(text)) < 2:
                continue
            if len(text_ids(tok, strip(text))) > 400:
                continue
            chosen.append(row)
            if len(chosen) >= n:
                break
        rows += chosen
    return rows


def record(args) -> None:
    torch.set_num_threads(2)
    from solm.core.chat import prompt_ids, text_ids
    from solm.core.vocabulary import add_control_tokens
    from solm.core.models import load_model
    from solm.core.pasta_lang import strip

    from solm.decode.pasta.runtime import PastaRuntime
    from solm.decode.tip.runtime import TipDecodeConfig, TipRequest, TipRuntime

    out: dict[str, torch.Tensor] = {}
    model, tok = load_model("smollm2-135m", dtype="fp32", device="cpu")
    add_control_tokens(model, tok, "pasta")
    rt = PastaRuntime(model, tok, pool_size=2048)
    for row in pasta_rows(args.bench_rows, args.rows, tok):
        prompt = prompt_ids(tok, row["prompt"], row.get("system"))
        for mode, text in (("parallel", row["annotated"]), ("sequential", strip(row["annotated"]))):
            ids = text_ids(tok, text)
            res = rt.replay(prompt, ids, mode=mode, record_logits=True)
            key = f"pasta/{row['id']}/{mode}"
            out[key + "/logits"] = res.logits.float().contiguous()
            out[key + "/ids"] = torch.tensor(res.ids)
            out[key + "/passes"] = torch.tensor([res.forward_passes])
            print(key, tuple(res.logits.shape), res.forward_passes, flush=True)

    from solm.core.jsonl import read_jsonl
    tmodel, ttok = load_model("smollm2-135m", dtype="fp32", device="cpu", system="tip",
                              num_registers=16)
    traces = list(read_jsonl(args.tip_traces))[: args.traces]
    pairs = [(prompt_ids(ttok, r["prompt"]), text_ids(ttok, r["response"])[: args.trace_tokens])
             for r in traces]
    trt = TipRuntime(tmodel, ttok, num_pages=256, page_size=16, num_registers=16)
    for policy in ("dense", "h2o", "streamingllm", "tip"):
        budget = 96 if policy in ("streamingllm", "h2o") else None
        cfg = TipDecodeConfig(policy=policy, budget=budget, batch_size=2,
                              record_logits=True, max_new_tokens=args.trace_tokens + 1)
        reqs = [TipRequest(i, p, forced=r) for i, (p, r) in enumerate(pairs)]
        for res in trt.run(reqs, cfg):
            key = f"tip/{policy}/{res.rid}"
            out[key + "/logits"] = res.logits.float().contiguous()
            out[key + "/ids"] = torch.tensor(res.ids)
            print(key, tuple(res.logits.shape), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(out, str(args.out))
    print(f"{len(out)} tensors -> {args.out}")


def compare(args) -> int:
    a, b = load_file(str(args.before)), load_file(str(args.after))
    missing = sorted(set(a) ^ set(b))
    worst = 0.0
    report = {}
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        if x.shape != y.shape:
            report[key] = f"shape {tuple(x.shape)} vs {tuple(y.shape)}"
            worst = float("inf")
            continue
        d = (x.double() - y.double()).abs().max().item() if x.numel() else 0.0
        worst = max(worst, d)
        if key.endswith("/logits"):
            report[key] = d
    print(json.dumps({"keys": len(a), "missing": missing, "max_abs_diff": worst,
                      "per_key": report}, indent=1))
    return 0 if not missing and worst < args.tol else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--bench-rows", type=Path, default=None)
    r.add_argument("--rows", type=int, default=6)
    r.add_argument("--tip-traces", type=Path, required=True)
    r.add_argument("--traces", type=int, default=3)
    r.add_argument("--trace-tokens", type=int, default=200)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--tol", type=float, default=1e-5)
    args = p.parse_args()
    if args.cmd == "record":
        record(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
