#!/bin/bash
# One BoNBoN round on recipe d with the content score (issue 47 item 4): 96 Dolly prompts of
# the distilled 1,000 that gave d no row (neither trained on nor AlpacaEval), d's Baseline-SFT
# answers as the content yardstick (greedy, llama.cpp, baseline.jsonl), 4 samples each,
# score = passes saved + min(1, content / baseline) - repeated 3-grams - guarded share;
# BoNBoN (LoRA r16 over d), then the selection prompts beside d and its baseline (their rows
# reused from runs/own/d/select). Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
B=runs/own/bonbon
test "$(wc -l < $B/baseline.jsonl)" -ge 96 || .venv/bin/pasta decode -m runs/own/baseline-d --mode sequential \
  -p $B/prompts.jsonl -o $B/baseline.jsonl --max-new-tokens 512 --repetition-penalty 1.2 --engine llama.cpp -q >> $B/baseline.log 2>&1
.venv/bin/pasta prefs -p $B/prompts.jsonl -m runs/own/d/pasta-sft --baseline $B/baseline.jsonl -o $B/prefs \
  -n 4 --score content --quality-weight 1 --repeat-weight 1 --guard-weight 1 --temperature 0.8 \
  --repetition-penalty 1.2 --max-new-tokens 512 --engine torch --seed 1 -q >> $B/prefs.log 2>&1 || exit 1
grep -qs '"complete": true' $B/bonbon/solm.json || .venv/bin/pasta bonbon --data $B/prefs/pairs.jsonl \
  --model runs/own/d/pasta-sft --out $B/bonbon --lora-r 16 --lr 2e-4 --epochs 1 --batch-size 4 \
  --eval-rows 6 --eval-every 8 --save-every 10 -q >> $B/bonbon.log 2>&1 || exit 1
test -d $B/select || cp -r runs/own/d/select $B/select
.venv/bin/pasta eval run -o $B/select --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=runs/own/baseline-d --method pasta:pasta-sft=runs/own/d/pasta-sft \
  --method pasta:pasta-bonbon=$B/bonbon \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q >> $B/select.log 2>&1 || exit 1
.venv/bin/pasta eval report $B/select -o $B/select/report -q >> $B/select.log 2>&1
echo finished >> $B/select.log
