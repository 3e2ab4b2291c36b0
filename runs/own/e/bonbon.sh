#!/bin/bash
# The kept PASTA model's three BoNBoN rounds and a fourth like the third, on the overlap model e (pasta-sft-overlap-cpu's
# source), for issue 48 (llama.cpp decodes the overlap layout; 1.2x its own loop needs ~1.52
# content tokens a pass): the same 96 prompts and baseline answers, the same weights and seeds
# as make own-kept-cpu's rounds. Resumable: rerun (samples are written as they come).
cd /work/main
export HF_HUB_OFFLINE=1
B=runs/own/bonbon   # prompts.jsonl and baseline.jsonl (d's Baseline-SFT answers)
E=runs/own/e
PREFS="-n 4 --score content --guard-weight 1 --temperature 0.8 --repetition-penalty 1.2 --max-new-tokens 512 --engine torch -q"
BON="--lora-r 16 --lr 2e-4 --epochs 1 --batch-size 4 --eval-rows 6 --eval-every 8 --save-every 10 -q"
done_() { grep -qs '"complete": true' "$1/solm.json"; }
prev=$E/pasta-sft
for r in "1 1 1" "2 2 3" "3 2 3" "4 2 3"; do
  set -- $r
  .venv/bin/pasta prefs -p $B/prompts.jsonl -m $prev --baseline $B/baseline.jsonl -o $E/prefs$1 \
    --quality-weight $2 --repeat-weight $3 --seed $1 $PREFS >> $E/prefs$1.log 2>&1 || exit 1
  done_ $E/bonbon$1 || .venv/bin/pasta bonbon --data $E/prefs$1/pairs.jsonl --model $prev \
    --out $E/bonbon$1 $BON >> $E/bonbon$1.log 2>&1 || exit 1
  prev=$E/bonbon$1
done
echo finished >> $E/bonbon.log
