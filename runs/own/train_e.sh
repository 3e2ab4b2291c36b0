#!/bin/bash
# Recipe e (d's training) on the own rows of 1,000 prompts at 768 tokens (the Makefile's own-select-cpu with OWN_RECIPE=e,
# OWN_BASELINE=e, on the shared copies of Dolly / AlpacaEval): Pasta-SFT and Baseline-SFT
# trained side by side (one core each), then the selection evaluation. Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
D="--lora-r 0 --lr 2e-4 --control-token-lr-scale 30 --batch-size 8 --epochs 1 --max-len 1536 --eval-rows 16 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q"
ROWS=runs/own/rows_768.jsonl  # a frozen copy of runs/own/distill/rows.jsonl
done_() { grep -qs '"complete": true' "$1/solm.json"; }
done_ runs/own/e/pasta-sft || OMP_NUM_THREADS=1 .venv/bin/pasta sft --data $ROWS --out runs/own/e/pasta-sft $D > runs/own/e_pasta.log 2>&1 &
done_ runs/own/baseline-e || OMP_NUM_THREADS=1 .venv/bin/pasta sft --data $ROWS --out runs/own/baseline-e --strip-annotations $D > runs/own/e_baseline.log 2>&1 &
wait
done_ runs/own/e/pasta-sft && done_ runs/own/baseline-e || exit 1
.venv/bin/pasta eval run -o runs/own/e/select --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=runs/own/baseline-e --method pasta:pasta-sft=runs/own/e/pasta-sft \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q > runs/own/e_select.log 2>&1
.venv/bin/pasta eval report runs/own/e/select -o runs/own/e/select/report -q >> runs/own/e_select.log 2>&1
echo finished >> runs/own/e_select.log
