#!/bin/bash
# The final prompts (AlpacaEval 31-94: --skip 30 --limit 64) with round 3 packed at rank 32
# (chosen on the selection prompts: select4.sh) and recipe e packed (pasta-sft-overlap-cpu),
# the packed Baseline-SFT as the baseline; one pasta eval run. Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pack
.venv/bin/pasta eval run -o runs/own/bonbon/final4 --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --skip 30 --limit 64 \
  --method sequential:baseline-sft=$P/baseline-r32-full --method pasta:pasta-bonbon-r3=$P/r3-r32 \
  --method pasta:pasta-sft-overlap=$P/overlap-r32 \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q || exit 1
.venv/bin/pasta eval report runs/own/bonbon/final4 -o runs/own/bonbon/final4/report -q
echo finished
