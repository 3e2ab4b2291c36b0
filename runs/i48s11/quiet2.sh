#!/bin/bash
# The kept overlap model against llama.cpp's own loop with every pass timed by width
# (bench/pasta_vs_llamacpp.py), as shipped (its generation_config: greedy, repetition penalty
# 1.2), then the same weights with the penalty off (runs/own/pack/e-r3-r32's
# generation_config, what the tenth session's 1.13x ran); then what each says about the floor.
# Nothing else running.
cd /work/main
export HF_HUB_OFFLINE=1
R=bench/results/engine_step
for v in "kept pasta-bonbon-overlap-cpu" "nopenalty runs/own/pack/e-r3-r32"; do
  set -- $v
  .venv/bin/python bench/pasta_vs_llamacpp.py -p /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 16 \
    --pasta-model $2 -o $R/vs_llamacpp_overlap_r3_$1.json > $R/vs_llamacpp_overlap_r3_$1.out 2>&1 || exit 1
  .venv/bin/python runs/i48s11/floor.py $R/vs_llamacpp_overlap_r3_$1.json > $R/vs_llamacpp_overlap_r3_$1.floor.txt || exit 1
done
echo finished
