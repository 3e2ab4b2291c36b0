"""Batched PASTA decoding on a GPU: tokens/s at batch 1, 8, 32 and 64 for randomly initialised
models (no weights travel), against `model.generate` on the same batch.

    python bench/gpu_batched.py --tokenizer TOKENIZER_DIR [--batches 1,8,32,64]
        [--prompt-tokens 64] [--new-tokens 128] [--out results.json]

Two configs: the embedded model's (SmolLM2-135M: hidden 576, 30 layers, 9 heads / 3 KV
heads) and a 1B-class Llama (Llama-3.2-1B's shape: hidden 2048, 16 layers, 32 / 8 heads,
vocab 128,256). Each request teacher-forces a fixed random answer (replay), so every batch
decodes the same number of tokens whatever a random model would sample; `model.generate`
gets `min_new_tokens = max_new_tokens` for the same reason. bf16, CUDA, timed with
synchronisation after a warm-up. `TOKENIZER_DIR`: any Hugging Face tokenizer folder (the
embedded model's, cached by `solm prepare` under ~/.cache/solm/models/smollm2-135m): the
control tokens are added to it; the 1B config's vocabulary is padded past it.

vLLM cannot travel to the accelerator machine, so `model.generate`
is the reference.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def configs(vocab: int) -> dict:
    from transformers import LlamaConfig

    return {
        "smollm2-135m-shape": LlamaConfig(
            hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
            num_attention_heads=9, num_key_value_heads=3, vocab_size=vocab,
            max_position_embeddings=8192, tie_word_embeddings=True),
        "llama-1b-shape": LlamaConfig(
            hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, vocab_size=max(vocab, 128_256),
            max_position_embeddings=8192, tie_word_embeddings=True, rope_theta=500000.0),
    }


def timed(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device here")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from solm.core.vocabulary import add_control_tokens
    from solm.decode.pasta.batched import BatchedPastaRuntime, BatchRequest
    from solm.decode.pasta.runtime import PastaDecodeConfig

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    add_control_tokens(None, tok, "pasta")
    gen = torch.Generator().manual_seed(0)
    rows = []
    for name, cfg in configs(len(tok)).items():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(
            "cuda", torch.bfloat16).eval()
        plain = [1000 + int(x) for x in torch.randint(0, 20000, (512,), generator=gen)]
        for b in (int(x) for x in args.batches.split(",")):
            prompts = [[plain[(i * 7 + j) % 512] for j in range(args.prompt_tokens)]
                       for i in range(b)]
            answers = [[plain[(i * 13 + j) % 512] for j in range(args.new_tokens)]
                       for i in range(b)]
            pool = b * (args.prompt_tokens + args.new_tokens + 2)
            rt = BatchedPastaRuntime(model, tok, pool_size=pool, max_batch=b)
            cfg_run = PastaDecodeConfig(mode="sequential", max_new_tokens=args.new_tokens + 1)

            def solm_run():
                list(rt.run(BatchRequest(i, p, cfg_run, scripts={0: a})
                            for i, (p, a) in enumerate(zip(prompts, answers))))

            solm_run()  # warm-up
            s = timed(solm_run)
            ids = torch.tensor(prompts, device="cuda")

            def hf_run():
                with torch.no_grad():
                    model.generate(ids, attention_mask=torch.ones_like(ids),
                                   max_new_tokens=args.new_tokens,
                                   min_new_tokens=args.new_tokens, do_sample=False,
                                   pad_token_id=0)

            hf_run()
            h = timed(hf_run)
            tokens = b * args.new_tokens
            rows.append({"model": name, "batch": b, "solm_tokens_per_s": round(tokens / s, 1),
                         "generate_tokens_per_s": round(tokens / h, 1),
                         "solm_over_generate": round(h / s, 3)})
            print(json.dumps(rows[-1]), flush=True)
        model = None  # free the weights before the next config
        torch.cuda.empty_cache()
    summary = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
               "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
