"""The GPU check: what a CPU cannot show about the paper path, run on one CUDA
device in a few minutes, written as one JSON of what held.

    python bench/gpu_check.py --out bench/results/gpu_check.json     # on a CUDA machine
    python bench/gpu_check.py --dry                                   # list the checks
    python bench/gpu_check.py --device cpu --only check_model_archs   # the CPU-able ones

Checks (tiny random models built from configs: no download, no weights travel):
- flex_losses_equal_sdpa: every trainer's loss (Pasta-SFT, Baseline-SFT, TIP-SFT, pdiff SFT,
  BoNBoN) of a batch whose structure is not causal, under --attention flex and sdpa, through
  the trainer's own loader, collator and Trainer class; on CUDA also the gradients (flex's
  backward exists only there).
- flex_graphs_bounded: BoNBoN log-probs over batches of 11 lengths under flex; the compiled
  graphs stop growing once each bucketed length was seen.
- sdpa_gqa_kernel: for a boolean mask and 4 query heads per KV head, which SDPA backends run
  `enable_gqa=True` and which run the same call with the KV heads copied, and their times
  (does a masked GQA call fall back to the math kernel?).
- check_model_archs: `solm check-model`'s comparison for tiny Llama, Qwen2, Qwen3, Mistral and
  Gemma-2 (softcapped) models on the device: every system within 1e-3 in fp32.
- bf16_rollout_logprobs: TIP-GRPO rollouts under bf16 autocast against the trainer's bf16
  recompute (max |difference|), and an fp32 rollout against it (the mismatch removed).
- flex_training_steps: `pasta sft --attention flex` for 4 steps on a tiny model: finishes
  with a finite loss that moved (gradients through flex).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

PASTA_ROWS = [
    {"prompt": "Give two tips.",
     "annotated": 'Tips:\n1. <promise topic="Sleep" tokens="1"/><async>Sleep eight hours.'
                  '</async>\n2. <promise topic="Water" tokens="1"/><async>Drink water.'
                  '</async>\n<sync/>Done.'},
    {"prompt": "List two fruits.",
     "annotated": 'Fruits: <promise topic="one" tokens="1"/><async>Apples are red.</async> and '
                  '<promise topic="two" tokens="1"/><async>Pears are green.</async><sync/> '
                  'That is all.'},
]
TIP_ROWS = [
    {"prompt": "What is 2 + 3?",
     "annotated": "<reg_0>Two plus three. <reg_1>That is five. <reg_0>So 5. <reg_2>Answer: 5"},
    {"prompt": "Name a prime.", "annotated": "<reg_0>Two is prime. <reg_0>Answer: 2"},
]


def tiny_folder(work: Path, arch: str = "llama", **extra) -> str:
    from solm.core.models import load_tokenizer, tiny_model

    tok = load_tokenizer("smollm2-135m")
    model, _ = tiny_model(tok, seed=2, arch=arch, attn_implementation="eager", **extra)
    folder = work / f"tiny-{arch}"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def write_rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def stages(work: Path, model: str) -> dict[str, Callable]:
    from solm.core.chat import text_ids
    from solm.core.models import load_tokenizer
    from solm.core.vocabulary import add_control_tokens
    from solm.train.bonbon import BonbonConfig, BonbonTrainer
    from solm.train.pdiff_sft import PdiffSFTConfig, PdiffSFTTrainer
    from solm.train.sft import PastaSFTConfig, PastaSFTTrainer
    from solm.train.tip_sft import TipSFTConfig, TipSFTTrainer

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pasta")
    answers = [r["annotated"] for r in PASTA_ROWS]
    pairs = [{"id": f"p{i}", "prompt": f"Give me tip {i}.", "n": 2 + i,
              "chosen": {"ids": text_ids(tok, answers[i]), "forced": [], "ended": True},
              "rejected": {"ids": text_ids(tok, answers[1 - i]), "forced": [], "ended": False}}
             for i in range(2)]
    common = dict(model=model, quiet=True, eval_rows=0)

    def out(name: str) -> str:
        return str(work / f"out-{name}-{time.time_ns()}")

    return {
        "pasta-sft": lambda: PastaSFTTrainer(PastaSFTConfig(
            **common, out=out("sft"), data=write_rows(work / "pasta.jsonl", PASTA_ROWS))),
        "baseline-sft": lambda: PastaSFTTrainer(PastaSFTConfig(
            **common, out=out("base"), strip_annotations=True,
            data=write_rows(work / "pasta.jsonl", PASTA_ROWS))),
        "tip-sft": lambda: TipSFTTrainer(TipSFTConfig(
            **common, out=out("tip"), registers=4,
            data=write_rows(work / "tip.jsonl", TIP_ROWS))),
        "pdiff-sft": lambda: PdiffSFTTrainer(PdiffSFTConfig(
            **common, out=out("pdiff"), data=write_rows(work / "pasta.jsonl", PASTA_ROWS))),
        "bonbon": lambda: BonbonTrainer(BonbonConfig(
            **common, out=out("bonbon"), data=write_rows(work / "pairs.jsonl", pairs))),
    }


def trainer_loss(stage, attention: str, work: Path, device: str, backward: bool):
    """(loss, {parameter name: gradient}) of the stage's first rows, through its own pieces
    (`attention` chosen as `--attention` would, allowed on a CPU for the forward)."""
    from solm.train.base import SolmTrainer

    SolmTrainer.attention = lambda self: attention
    stage.check()
    model, tok, vocab = stage.load_model()
    data = stage.prepare_data(stage.read_data(), tok, vocab)
    args = stage.training_arguments(data, work / f"ckpt-{attention}-{time.time_ns()}", 1,
                                    False, False)
    model.to(device)
    stage.before_training(model, tok, vocab, data, args)
    trainer = stage._trainer(model, tok, vocab, data, args, work / f"log-{time.time_ns()}.jsonl")
    stage._close_log()
    batch = trainer.data_collator(data.train[:2])
    batch = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
    model.eval()
    if not backward:
        with torch.no_grad():
            return trainer.compute_loss(model, batch).item(), {}
    model.zero_grad()
    loss = trainer.compute_loss(model, batch)
    loss.backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters()
             if p.grad is not None}
    return loss.item(), grads


def flex_losses_equal_sdpa(work: Path, device: str) -> dict:
    from solm.train.base import SolmTrainer

    cuda = device.startswith("cuda")
    model = tiny_folder(work)
    figures, held = {}, True
    original = SolmTrainer.attention
    try:
        for name, make in stages(work, model).items():
            sdpa, g_sdpa = trainer_loss(make(), "sdpa", work, device, cuda)
            flex, g_flex = trainer_loss(make(), "flex", work, device, cuda)
            grad_diff = max(((g_flex[n] - g).abs().max().item() for n, g in g_sdpa.items()),
                            default=None)
            figures[name] = {"sdpa": sdpa, "flex": flex, "loss_diff": abs(sdpa - flex),
                             "max_grad_diff": grad_diff}
            held &= abs(sdpa - flex) < 1e-4 and (grad_diff is None or grad_diff < 1e-3)
    finally:
        SolmTrainer.attention = original
    return {"held": held, "gradients_compared": cuda, "per_trainer": figures}


def flex_graphs_bounded(work: Path, device: str) -> dict:
    from torch._dynamo.utils import counters

    from solm.core.chat import text_ids
    from solm.core.models import load_tokenizer, tiny_model
    from solm.core.systems.pasta import PastaVocab
    from solm.core.vocabulary import add_control_tokens
    from solm.train.flex import flex_copy
    from solm.train.sequence_logprobs import SampledAnswer, batch_answers, token_logprobs

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pasta")
    vocab = PastaVocab.from_tokenizer(tok)
    model = flex_copy(tiny_model(tok, seed=0)[0].to(device))
    prompt, base = text_ids(tok, "Say something."), text_ids(tok, PASTA_ROWS[0]["annotated"])
    filler = text_ids(tok, " and more words")

    def graphs_after(extras) -> int:
        for extra in extras:
            batch = batch_answers([SampledAnswer(prompt, base + filler * extra),
                                   SampledAnswer(prompt, base)], vocab, tok.eos_token_id, 0,
                                  flex=True)
            with torch.no_grad():
                token_logprobs(model, batch)
        return counters["stats"]["unique_graphs"]

    graphs_after([0, 40])
    settled = graphs_after([1, 2])
    after = graphs_after([3, 5, 8, 13, 21, 30, 34, 38, 39])
    return {"held": after == settled, "graphs_settled": settled, "graphs_after": after}


def sdpa_gqa_kernel(work: Path, device: str) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    if not device.startswith("cuda"):
        return {"held": None, "skipped": "CUDA backends only"}
    b, hq, hkv, t, d = 4, 32, 8, 2048, 128
    q = torch.randn(b, hq, t, d, device=device, dtype=torch.bfloat16)
    k = torch.randn(b, hkv, t, d, device=device, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    mask = torch.ones(t, t, dtype=torch.bool, device=device).tril()[None, None]
    copied = (k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1))
    out = {}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                    SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH):
        for label, keys, gqa in (("enable_gqa", (k, v), True), ("kv_copied", copied, False)):
            try:
                with sdpa_kernel([backend]):
                    sdpa(q, *keys, attn_mask=mask, enable_gqa=gqa)
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    for _ in range(10):
                        sdpa(q, *keys, attn_mask=mask, enable_gqa=gqa)
                    torch.cuda.synchronize()
                out[f"{backend.name}/{label}"] = round((time.perf_counter() - start) / 10 * 1e3,
                                                       3)
            except RuntimeError as e:
                out[f"{backend.name}/{label}"] = f"refused: {str(e).splitlines()[0][:120]}"
    fast = [key for key, ms in out.items() if key.endswith("enable_gqa")
            and isinstance(ms, float) and not key.startswith("MATH")]
    return {"held": bool(fast), "ms_per_call": out,
            "note": "held: a non-math backend runs a masked enable_gqa call"}


def check_model_archs(work: Path, device: str) -> dict:
    from solm.core.models import load_model
    from solm.core.vocabulary import add_control_tokens
    from solm.decode.check_model import check_model

    archs = {"llama": {}, "qwen2": {}, "qwen3": {}, "mistral": {},
             "gemma2": {"attn_logit_softcapping": 0.5, "final_logit_softcapping": 2.0}}
    results, held = {}, True
    for arch, extra in archs.items():
        folder = tiny_folder(work, arch, **extra)

        def load(tokens: str, folder=folder):
            m, tok = load_model(folder, dtype="fp32", device=device, attn_implementation="eager")
            add_control_tokens(m, tok, tokens, num_registers=4)
            return m, tok

        checks = check_model(load)
        results[arch] = {c.system: [c.status, c.max_diff] for c in checks}
        held &= all(c.status == "ok" for c in checks)
    return {"held": held, "per_arch": results}


def bf16_rollout_logprobs(work: Path, device: str) -> dict:
    import contextlib
    from types import SimpleNamespace

    from solm.core.models import load_tokenizer, tiny_model
    from solm.core.systems.tip import TipVocab
    from solm.core.vocabulary import add_control_tokens
    from solm.train.grpo import TipRollouts, completion_logprobs

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "tip", num_registers=4)
    vocab = TipVocab.from_tokenizer(tok, 4)
    model = tiny_model(tok, seed=5)[0]
    # a head that favours the registers (rollouts reuse them, logits are large: where an
    # fp32 sampler and a bf16 trainer part most), as tests/test_tip_grpo.py builds it
    old = model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        head.bias[vocab.control_ids] = 6.0
    model.config.tie_word_embeddings = False
    model.lm_head = head
    model = model.to(device).eval()
    kind = torch.device(device).type

    def rollout(autocast):
        rollouts = TipRollouts(tok, 4, "tip", page_size=16, batch_size=4,
                               max_completion_length=64, temperature=1.0, top_p=1.0)
        trainer = SimpleNamespace(model=model, accelerator=SimpleNamespace(
            unwrap_model=lambda m: m, autocast=autocast))
        return rollouts(["What is 2 + 3?", "Name a prime.", "Hi", "Count to five."], trainer)

    out = rollout(lambda: torch.autocast(kind, dtype=torch.bfloat16))
    pad = tok.pad_token_id or 0
    p, c = max(map(len, out["prompt_ids"])), max(map(len, out["completion_ids"]))
    ids = torch.tensor([[pad] * (p - len(a)) + a + b + [pad] * (c - len(b))
                        for a, b in zip(out["prompt_ids"], out["completion_ids"])], device=device)
    mask = torch.tensor([[0] * (p - len(a)) + [1] * (len(a) + len(b)) + [0] * (c - len(b))
                         for a, b in zip(out["prompt_ids"], out["completion_ids"])],
                        device=device)
    with torch.no_grad(), torch.autocast(kind, dtype=torch.bfloat16):
        bf16, _ = completion_logprobs(model, ids, mask, c, vocab, 1.0)
    with torch.no_grad(), contextlib.nullcontext():
        fp32, _ = completion_logprobs(model, ids, mask, c, vocab, 1.0)
    worst = max((bf16[i, :len(s)].float().cpu() - torch.tensor(s)).abs().max().item()
                for i, s in enumerate(out["logprobs"]))
    before = (fp32 - bf16.float())[mask[:, -c:].bool()].abs().max().item()
    return {"held": worst < before / 3, "bf16_rollout_vs_bf16_recompute": worst,
            "fp32_vs_bf16_recompute": before}


def flex_training_steps(work: Path, device: str) -> dict:
    from solm.train.sft import PastaSFTConfig, PastaSFTTrainer

    if not device.startswith("cuda"):
        return {"held": None, "skipped": "FlexAttention has no backward on a CPU"}
    rows = write_rows(work / "train.jsonl", PASTA_ROWS * 8)
    meta = PastaSFTTrainer(PastaSFTConfig(
        model=tiny_folder(work), data=rows, out=str(work / "flex-sft"), quiet=True,
        eval_rows=0, max_steps=4, attention="flex", micro_batch_size=2,
        batch_size=2, logging_steps=1)).train()  # a loss per step: did it move?
    losses = [json.loads(line)["loss"] for line in
              (work / "flex-sft" / "train_log.jsonl").read_text().splitlines()
              if '"loss"' in line]
    finite = all(l == l and abs(l) < 1e9 for l in losses)
    return {"held": finite and len(set(losses)) > 1, "losses": losses,
            "steps": meta["results"]["global_steps"]}


CHECKS: dict[str, Callable[[Path, str], dict]] = {
    "flex_losses_equal_sdpa": flex_losses_equal_sdpa,
    "flex_graphs_bounded": flex_graphs_bounded,
    "sdpa_gqa_kernel": sdpa_gqa_kernel,
    "check_model_archs": check_model_archs,
    "bf16_rollout_logprobs": bf16_rollout_logprobs,
    "flex_training_steps": flex_training_steps,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("bench/results/gpu_check.json"))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--only", nargs="*", choices=list(CHECKS), default=None)
    p.add_argument("--dry", action="store_true", help="List the checks; run nothing.")
    args = p.parse_args()
    names = args.only or list(CHECKS)
    if args.dry:
        plan = {n: (CHECKS[n].__doc__ or "").strip() or n for n in names}
        print(json.dumps({"device": args.device, "checks": names}, indent=2))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"dry": True, "checks": plan}, indent=2))
        return 0
    report = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda")
              else args.device, "torch": torch.__version__, "checks": {}}
    for name in names:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            try:
                result = CHECKS[name](Path(tmp), args.device)
            except Exception as e:  # a check that breaks is a finding, not the end of the run
                result = {"held": False, "error": f"{type(e).__name__}: {e}",
                          "trace": traceback.format_exc()[-2000:]}
        result["seconds"] = round(time.perf_counter() - started, 1)
        report["checks"][name] = result
        print(f"{name}: held={result.get('held')} ({result['seconds']} s)", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))  # as it goes
    return 0 if all(r.get("held") is not False for r in report["checks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
