#!/bin/bash
# Round 3 (bonbon4 = BoNBoN over v1 on v1's own samples) packed at rank 32, on the selection
# prompts against the packed Baseline-SFT (the kept baseline-sft-cpu), v1 packed (the kept
# pasta-bonbon-cpu) beside it in the same run. Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pack
test -f $P/r3-r32/delta.json || .venv/bin/python -c "from solm.core.kept_difference import pack_delta; pack_delta('runs/own/bonbon/bonbon4', 'smollm2-135m', '$P/r3-r32', 32, 32)" || exit 1
.venv/bin/pasta eval run -o runs/own/bonbon/select4 --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=$P/baseline-r32-full --method pasta:pasta-bonbon=$P/pasta-r32-full \
  --method pasta:pasta-bonbon-r3=$P/r3-r32 \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q || exit 1
.venv/bin/pasta eval report runs/own/bonbon/select4 -o runs/own/bonbon/select4/report -q
echo finished
