#!/bin/bash
# Planned Diffusion on the own-answer rows (issue 47 item 3): exact promised lengths, a cycle of
# seven pad tokens, pdiff-cpu's LoRA recipe; resumable (rerun). Then the selection prompts
# against the kept Baseline-SFT (d's, the same rows) as in `make pdiff-exact-cpu`.
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pdiff-exact
grep -qs '"complete": true' $P/pdiff-sft/solm.json || .venv/bin/pdiff sft --data runs/own/rows_384.jsonl \
  --out $P/pdiff-sft --lora-r 8 --lr 1e-3 --batch-size 4 --epochs 1 --max-len 1024 --eval-rows 16 \
  --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 --extra-pads 0 --pad-cycle 7 -q >> $P/train.log 2>&1 || exit 1
.venv/bin/pasta eval run -o $P/select --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=baseline-sft-cpu \
  --method pdiff:exact=$P/pdiff-sft,steps_ratio=0.5 \
  --method pdiff:exact-conf=$P/pdiff-sft,steps_ratio=0.5,confidence_threshold=0.9 \
  --max-new-tokens 384 --batch-size 16 --repetition-penalty 1.2 --no-judge -q >> $P/select.log 2>&1 || exit 1
.venv/bin/pasta eval report $P/select -o $P/select/report -q >> $P/select.log 2>&1
echo finished >> $P/select.log
