#!/bin/bash
# Round 2 rescored (pasta prefs reruns with other weights on round 1's samples, nothing decoded):
# v1 = λ 2, μ 3, ν 1; v2 = λ 3, μ 3, ν 1, min length 0.8x the baseline. BoNBoN over round 1
# for each (LoRA r16, one epoch), then the selection prompts beside the earlier models
# (their rows reused). Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
B=runs/own/bonbon
for v in v1 v2; do
  grep -qs '"complete": true' $B/bonbon3_$v/solm.json || .venv/bin/pasta bonbon --data $B/rescore_$v/pairs.jsonl \
    --model $B/bonbon --out $B/bonbon3_$v --lora-r 16 --lr 2e-4 --epochs 1 --batch-size 4 \
    --eval-rows 6 --eval-every 8 --save-every 10 -q >> $B/bonbon3_$v.log 2>&1 || exit 1
done
.venv/bin/pasta eval run -o $B/select --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=runs/own/baseline-d --method pasta:pasta-sft=runs/own/d/pasta-sft \
  --method pasta:pasta-bonbon=$B/bonbon --method pasta:pasta-bonbon2=$B/bonbon2 \
  --method pasta:pasta-bonbon3-v1=$B/bonbon3_v1 --method pasta:pasta-bonbon3-v2=$B/bonbon3_v2 \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q >> $B/select.log 2>&1 || exit 1
.venv/bin/pasta eval report $B/select -o $B/select/report -q >> $B/select.log 2>&1
echo finished3 >> $B/select.log
