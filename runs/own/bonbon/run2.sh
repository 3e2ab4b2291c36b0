#!/bin/bash
# Round 2 of the content-score BoNBoN on d (after run.sh): samples from round 1's model, the
# same 96 prompts and baseline answers, seed 2, repeated 3-grams weighted 3 (round 1 raised
# them from 5.6% to 9%); BoNBoN (LoRA r16 over round 1, one epoch); the selection prompts
# beside round 1 (its rows reused). Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
B=runs/own/bonbon
.venv/bin/pasta prefs -p $B/prompts.jsonl -m $B/bonbon --baseline $B/baseline.jsonl -o $B/prefs2 \
  -n 4 --score content --quality-weight 1 --repeat-weight 3 --guard-weight 1 --temperature 0.8 \
  --repetition-penalty 1.2 --max-new-tokens 512 --engine torch --seed 2 -q >> $B/prefs2.log 2>&1 || exit 1
grep -qs '"complete": true' $B/bonbon2/solm.json || .venv/bin/pasta bonbon --data $B/prefs2/pairs.jsonl \
  --model $B/bonbon --out $B/bonbon2 --lora-r 16 --lr 2e-4 --epochs 1 --batch-size 4 \
  --eval-rows 6 --eval-every 8 --save-every 10 -q >> $B/bonbon2.log 2>&1 || exit 1
.venv/bin/pasta eval run -o $B/select --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=runs/own/baseline-d --method pasta:pasta-sft=runs/own/d/pasta-sft \
  --method pasta:pasta-bonbon=$B/bonbon --method pasta:pasta-bonbon2=$B/bonbon2 \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q >> $B/select.log 2>&1 || exit 1
.venv/bin/pasta eval report $B/select -o $B/select/report -q >> $B/select.log 2>&1
echo finished2 >> $B/select.log
