#!/bin/bash
# The overlap model after three BoNBoN rounds (runs/own/e/bonbon3, packed at rank 32) on the
# selection prompts (AlpacaEval 1-30) against the packed Baseline-SFT, as runs/own/e/select.sh
# measured e itself. Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pack
.venv/bin/pasta eval run -o runs/own/e/select_r3 --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=$P/baseline-r32-full --method pasta:e-bonbon-r3=$P/e-r3-r32 \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q || exit 1
.venv/bin/pasta eval report runs/own/e/select_r3 -o runs/own/e/select_r3/report -q
echo finished
