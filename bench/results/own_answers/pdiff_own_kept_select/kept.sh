#!/bin/bash
# Whether the own-row Planned Diffusion recipe (exact lengths, seven-pad cycle, LoRA r8) should
# replace the kept pdiff-cpu / pdiff-overlap-cpu: the same recipe in the overlap layout, then
# one run on the selection prompts with the kept models and the own-row ones against the kept
# Baseline-SFT (steps ratio 0.5, 384 tokens). Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pdiff-exact
grep -qs '"complete": true' $P/pdiff-sft-overlap/solm.json || .venv/bin/pdiff sft --data runs/own/rows_384.jsonl \
  --out $P/pdiff-sft-overlap --lora-r 8 --lr 1e-3 --batch-size 4 --epochs 1 --max-len 1024 --eval-rows 16 \
  --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 --extra-pads 0 --pad-cycle 7 \
  --positions overlap -q >> $P/train_overlap.log 2>&1 || exit 1
.venv/bin/pasta eval run -o $P/kept --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=baseline-sft-cpu \
  --method pdiff:own-exact=$P/pdiff-sft,steps_ratio=0.5 \
  --method pdiff:own-exact-overlap=$P/pdiff-sft-overlap,steps_ratio=0.5 \
  --method pdiff:kept=pdiff-cpu,steps_ratio=0.5 \
  --method pdiff:kept-overlap=pdiff-overlap-cpu,steps_ratio=0.5 \
  --max-new-tokens 384 --batch-size 16 --repetition-penalty 1.2 --no-judge -q >> $P/kept.log 2>&1 || exit 1
.venv/bin/pasta eval report $P/kept -o $P/kept/report -q >> $P/kept.log 2>&1
echo finished >> $P/kept.log
