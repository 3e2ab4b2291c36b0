#!/bin/bash
# The fully finetuned Planned Diffusion on the selection prompts against the kept Baseline-SFT,
# as the LoRA recipes were measured (pdiff_own_exact_select/: steps ratio 0.5, 384 tokens).
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pdiff-full
.venv/bin/pasta eval run -o $P/select --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=runs/own/pack/baseline-r32-full \
  --method pdiff:full=$P/pdiff-sft,steps_ratio=0.5 \
  --method pdiff:full-conf=$P/pdiff-sft,steps_ratio=0.5,confidence_threshold=0.9 \
  --max-new-tokens 384 --batch-size 16 --repetition-penalty 1.2 --no-judge -q || exit 1
.venv/bin/pasta eval report $P/select -o $P/select/report -q
echo finished
