#!/bin/bash
# pasta-bonbon-overlap-cpu (runs/own/pack/e-r3-r32) on the final prompts (AlpacaEval 31-94:
# --skip 30 --limit 64) against the packed Baseline-SFT, as runs/own/pack/final.sh measured the
# Pred-10X kept models; the baseline's rows are that run's (same model, prompts and settings),
# copied in so only the new method decodes. Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pack
O=runs/i48s11/final_overlap
mkdir -p $O/outputs
[ -s $O/outputs/baseline-sft.jsonl ] || cp $P/final/outputs/baseline-sft.jsonl $O/outputs/
.venv/bin/pasta eval run -o $O --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --skip 30 --limit 64 \
  --method sequential:baseline-sft=$P/baseline-r32-full --method pasta:pasta-bonbon-overlap=$P/e-r3-r32 \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q || exit 1
.venv/bin/pasta eval report $O -o $O/report -q
echo finished
