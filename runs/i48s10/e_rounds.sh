#!/bin/bash
# Issue 48, tenth session: the overlap model after BoNBoN rounds 2 and 3 (runs/own/e/bonbon.sh),
# each packed at rank 32, on llama.cpp q4_0 against llama.cpp's own loop (as
# runs/i48s9/quiet_e_r1.sh, now with each pass's width); nothing else running. Resumable.
cd /work/main
export HF_HUB_OFFLINE=1
P=runs/own/pack
R=bench/results/engine_step
for r in ${ROUNDS:-4 3 2}; do
  test -f runs/own/e/bonbon$r/solm.json || continue
  test -f $P/e-r$r-r32/delta.json || .venv/bin/python -c "from solm.core.kept_difference import pack_delta; pack_delta('runs/own/e/bonbon$r', 'smollm2-135m', '$P/e-r$r-r32', 32, 32)" || exit 1
  test -f $R/vs_llamacpp_overlap_r${r}_llama_q4.json || .venv/bin/python bench/pasta_vs_llamacpp.py \
    -p /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 16 --pasta-model $P/e-r$r-r32 \
    --baseline-model baseline-sft-cpu --engine llama.cpp --gguf-type q4_0 --baseline-gguf-type q4_0 \
    -o $R/vs_llamacpp_overlap_r${r}_llama_q4.json > $R/vs_llamacpp_overlap_r${r}_llama_q4.out 2>&1 || exit 1
done
echo finished
