#!/bin/bash
# The packed models (rank-32 difference from the base, int8 factors) on the selection prompts,
# the packed baseline as the baseline. Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pack
.venv/bin/pasta eval run -o $P/select --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=$P/baseline-r32-full --method pasta:pasta-packed=$P/pasta-r32-full \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q >> $P/select.log 2>&1 || exit 1
.venv/bin/pasta eval report $P/select -o $P/select/report -q >> $P/select.log 2>&1
echo finished >> $P/select.log
