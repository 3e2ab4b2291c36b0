#!/bin/bash
# The final prompts (AlpacaEval 31-94: --skip 30 --limit 64) with the packed models, the packed
# Baseline-SFT as the baseline; one pasta eval run. Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pack
.venv/bin/pasta eval run -o $P/final --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --skip 30 --limit 64 \
  --method sequential:baseline-sft=$P/baseline-r32-full --method pasta:pasta-bonbon=$P/pasta-r32-full \
  --method pasta:pasta-sft=$P/pasta-sft-r32-full \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q >> $P/final.log 2>&1 || exit 1
.venv/bin/pasta eval report $P/final -o $P/final/report -q >> $P/final.log 2>&1
echo finished >> $P/final.log
