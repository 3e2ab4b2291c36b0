"""The implicit reward margin of a BoNBoN run on held-out pairs, at each of its checkpoints.

    python bench/bonbon_margin.py \
        --run runs/prefs/lambda-0-own/round-1/bonbon=runs/prefs/margin/from-sft/pairs.jsonl \
        --run runs/prefs/lambda-0-own/round-2/bonbon=runs/prefs/margin/from-own-r1/pairs.jsonl \
        --out bench/results/prefs_rounds/heldout_margin.json

`pasta bonbon` logs the margin on its own few held-out pairs (`--eval-rows`), too few to tell
a trend from noise. Here each run is read against a pairs file that `pasta prefs` made on
prompts the run never saw, sampled from the run's own reference (its parent: the pairs a
next round would train on). Per checkpoint (`checkpoints/checkpoint-K`, then the final
adapter), per pair:

    margin = (log π(y_w) − log π_0(y_w)) − (log π(y_l) − log π_0(y_l))

summed over the answer's own tokens under its structure (`solm.train.sequence_logprobs`, as
training scores it), fp32. Reported: the mean with a bootstrap 95% interval over pairs
(10,000 draws, seeded), and the share of pairs the policy ranks the right way (margin > 0).
At step 0 the policy is the reference, so the margin is 0 by definition.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch


def bootstrap_mean(values: list[float], draws: int = 10_000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(draws))
    return means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def checkpoints(run: Path) -> list[tuple[int, Path]]:
    """(step, adapter folder) of each saved checkpoint, then the final adapter."""
    found = []
    for folder in (run / "checkpoints").glob("checkpoint-*"):
        if (folder / "adapter_model.safetensors").exists():
            found.append((int(folder.name.split("-")[1]), folder))
    found.sort()
    state = json.loads((run / "solm.json").read_text())
    final_step = state.get("results", {}).get("global_steps")
    if not found or found[-1][0] != final_step:
        found.append((final_step, run))
    return found


def pair_logprobs(model, collator, pairs: list[dict]) -> list[tuple[float, float]]:
    from solm.train.sequence_logprobs import sequence_logprobs

    out = []
    with torch.no_grad():
        for row in pairs:
            logps = sequence_logprobs(model, collator([row])).float().cpu()
            out.append((float(logps[0]), float(logps[1])))
    return out


def measure(run: Path, pairs_path: Path) -> dict:
    from peft import PeftModel

    from solm.core.models import adapter_parent, load_model
    from solm.train.bonbon import PairCollator, load_pairs

    pairs = load_pairs(str(pairs_path))
    parent = adapter_parent(run)
    reference, tokenizer = load_model(parent, dtype="float32", device="cpu", system="pasta")
    from solm.core.systems.pasta import PastaVocab

    vocab = PastaVocab.from_tokenizer(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    collator = PairCollator(tokenizer, vocab, tokenizer.eos_token_id, pad)
    ref = pair_logprobs(reference, collator, pairs)
    steps = [{"step": 0, "mean_margin": 0.0, "interval": [0.0, 0.0], "ranked_right": None}]
    for step, folder in checkpoints(run):
        started = time.perf_counter()
        base, _ = load_model(parent, dtype="float32", device="cpu", system="pasta")
        policy = PeftModel.from_pretrained(base, str(folder)).eval()
        pol = pair_logprobs(policy, collator, pairs)
        margins = [(pc - rc) - (pr - rr) for (pc, pr), (rc, rr) in zip(pol, ref)]
        mean = sum(margins) / len(margins)
        steps.append({"step": step, "checkpoint": str(folder), "mean_margin": round(mean, 4),
                      "interval": [round(x, 4) for x in bootstrap_mean(margins)],
                      "ranked_right": round(sum(m > 0 for m in margins) / len(margins), 4),
                      "seconds": round(time.perf_counter() - started, 1)})
        print(f"{run} step {step}: margin {mean:+.3f} {steps[-1]['interval']} "
              f"right {steps[-1]['ranked_right']:.2f}", flush=True)
    return {"run": str(run), "reference": parent, "pairs": str(pairs_path),
            "n_pairs": len(pairs), "steps": steps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", action="append", required=True,
                   help="BONBON_FOLDER=PAIRS_JSONL (pairs sampled from the run's parent on "
                        "prompts it did not train on); repeatable.")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    results = []
    for spec in args.run:
        run, _, pairs = spec.partition("=")
        if not pairs:
            p.error(f"--run {spec}: expected BONBON_FOLDER=PAIRS_JSONL")
        results.append(measure(Path(run), Path(pairs)))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"runs": results}, indent=1) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
