#!/bin/bash
# The overlap model after one BoNBoN round (runs/own/e/bonbon1, packed at rank 32) on llama.cpp
# q4_0 against llama.cpp's own loop, as quiet.sh; nothing else running.
cd /work/main
export HF_HUB_OFFLINE=1
test -f runs/own/pack/e-r1-r32/delta.json || .venv/bin/python -c "from solm.core.kept_difference import pack_delta; pack_delta('runs/own/e/bonbon1', 'smollm2-135m', 'runs/own/pack/e-r1-r32', 32, 32)" || exit 1
.venv/bin/python bench/pasta_vs_llamacpp.py -p /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 16 \
  --pasta-model runs/own/pack/e-r1-r32 --baseline-model baseline-sft-cpu --engine llama.cpp --gguf-type q4_0 \
  --baseline-gguf-type q4_0 -o bench/results/engine_step/vs_llamacpp_overlap_r1_llama_q4.json \
  > bench/results/engine_step/vs_llamacpp_overlap_r1_llama_q4.out 2>&1
echo finished
