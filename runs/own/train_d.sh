#!/bin/bash
# Recipe d on the own rows of 1,000 prompts (the Makefile's own-select-cpu with OWN_RECIPE=d,
# OWN_BASELINE=d, on the shared copies of Dolly / AlpacaEval): Pasta-SFT and Baseline-SFT
# trained side by side (one core each), then the selection evaluation. Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
D="--lora-r 0 --lr 2e-4 --control-token-lr-scale 30 --batch-size 8 --epochs 1 --max-len 1536 --eval-rows 16 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q"
ROWS=runs/own/rows_384.jsonl  # the 384-token rows (runs/own/distill holds the 768-token ones now)
done_() { grep -qs '"complete": true' "$1/solm.json"; }
done_ runs/own/d/pasta-sft || OMP_NUM_THREADS=1 .venv/bin/pasta sft --data $ROWS --out runs/own/d/pasta-sft $D > runs/own/d_pasta.log 2>&1 &
done_ runs/own/baseline-d || OMP_NUM_THREADS=1 .venv/bin/pasta sft --data $ROWS --out runs/own/baseline-d --strip-annotations $D > runs/own/d_baseline.log 2>&1 &
wait
done_ runs/own/d/pasta-sft && done_ runs/own/baseline-d || exit 1
.venv/bin/pasta eval run -o runs/own/d/select --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=runs/own/baseline-d --method pasta:pasta-sft=runs/own/d/pasta-sft \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q > runs/own/d_select.log 2>&1
.venv/bin/pasta eval report runs/own/d/select -o runs/own/d/select/report -q >> runs/own/d_select.log 2>&1
echo finished >> runs/own/d_select.log
