#!/bin/bash
# Rank 64 packs (rank 128 would put the embedding factor over the 5 MB file limit) of pasta-bonbon-cpu's and baseline-sft-cpu's sources, unpacked to full
# folders, then the selection prompts (AlpacaEval 1-30) in one run. Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pack
for r in 64; do
  for pair in "pasta runs/own/bonbon/bonbon3_v1" "baseline runs/own/baseline-d"; do
    set -- $pair
    test -f $P/$1-r$r/delta.json || .venv/bin/python -c "from solm.core.kept_difference import pack_delta; pack_delta('$2', 'smollm2-135m', '$P/$1-r$r', $r, $r)"
    test -f $P/$1-r$r-full/model.safetensors || .venv/bin/python -c "from solm.core.models import unpack_difference; unpack_difference('$P/$1-r$r', '$P/$1-r$r-full')"
  done
done
du -sh $P/*-r64
.venv/bin/pasta eval run -o $P/select_r64 --prompts /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 30 \
  --method sequential:baseline-sft=$P/baseline-r64-full --method pasta:pasta-packed=$P/pasta-r64-full \
  --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q || exit 1
.venv/bin/pasta eval report $P/select_r64 -o $P/select_r64/report -q
echo finished
