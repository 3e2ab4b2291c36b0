#!/bin/bash
# Planned Diffusion fully finetuned on the own-answer rows (issue 47 item 3, the untried lever
# of the LoRA recipes): recipe d's full finetune (lr 2e-4, control-token rows at 30x, one
# epoch, batch 8) with exact promised lengths and a cycle of seven pads. Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=${THREADS:-1}
P=runs/own/pdiff-full
grep -qs '"complete": true' $P/pdiff-sft/solm.json || .venv/bin/pdiff sft --data runs/own/rows_384.jsonl \
  --out $P/pdiff-sft --lora-r 0 --lr 2e-4 --control-token-lr-scale 30 --batch-size 8 --epochs 1 \
  --max-len 1024 --eval-rows 16 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 \
  --extra-pads 0 --pad-cycle 7 -q >> $P/train.log 2>&1 || exit 1
echo trained >> $P/train.log
