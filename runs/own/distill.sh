#!/bin/bash
# own-answer distillation (resumable: rerun this script after a stop)
cd /work/main
.venv/bin/pasta distill -p /work/shared/data/instruct/dolly_5k.jsonl \
  --exclude /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 1000 \
  --match '^[^\n]*\b(list|give me|what are|ways|ideas|tips|steps|examples|name|brainstorm|reasons|suggest|pros|cons|advantages|benefits|how (do|can|should|to)|types|kinds|things)\b' \
  --sampled 1 -o runs/own/distill --max-new-tokens ${CAP:-768} --repetition-penalty 1.2 -q >> runs/own/distill.log 2>&1
