#!/bin/bash
# Recipe e (d in the overlap layout) packed at rank 32, on the selection prompts (AlpacaEval
# 1-30) against the packed Baseline-SFT (the kept baseline-sft-cpu), as the rank-32 models
# were measured (own_packed_select/). Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pack
test -f $P/overlap-r32/delta.json || .venv/bin/python -c "from solm.core.kept_difference import pack_delta; pack_delta('runs/own/e/pasta-sft', 'smollm2-135m', '$P/overlap-r32', 32, 32)" || exit 1
test -f $P/overlap-r32-full/model.safetensors || .venv/bin/python -c "from solm.core.models import unpack_difference; unpack_difference('$P/overlap-r32', '$P/overlap-r32-full')" || exit 1
.venv/bin/pasta eval run -o runs/own/e/select --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=$P/baseline-r32-full --method pasta:pasta-sft-overlap=$P/overlap-r32-full \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q || exit 1
.venv/bin/pasta eval report runs/own/e/select -o runs/own/e/select/report -q
echo finished
