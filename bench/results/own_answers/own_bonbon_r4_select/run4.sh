#!/bin/bash
# Round 3 of the content-score BoNBoN: samples from round 2 v1 (the kept pasta-bonbon-cpu's
# source), the same 96 prompts and baseline answers, seed 3, v1's weights (λ 2, μ 3, ν 1);
# BoNBoN over v1 (LoRA r16, one epoch). Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=${THREADS:-2}
B=runs/own/bonbon
.venv/bin/pasta prefs -p $B/prompts.jsonl -m $B/bonbon3_v1 --baseline $B/baseline.jsonl -o $B/prefs4 \
  -n 4 --score content --quality-weight 2 --repeat-weight 3 --guard-weight 1 --temperature 0.8 \
  --repetition-penalty 1.2 --max-new-tokens 512 --engine torch --seed 3 -q >> $B/prefs4.log 2>&1 || exit 1
grep -qs '"complete": true' $B/bonbon4/solm.json || .venv/bin/pasta bonbon --data $B/prefs4/pairs.jsonl \
  --model $B/bonbon3_v1 --out $B/bonbon4 --lora-r 16 --lr 2e-4 --epochs 1 --batch-size 4 \
  --eval-rows 6 --eval-every 8 --save-every 10 -q >> $B/bonbon4.log 2>&1 || exit 1
echo trained >> $B/bonbon4.log
