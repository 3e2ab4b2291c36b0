#!/bin/bash
# The eleventh session's timings, one after the other on a quiet CPU: the one-token pass
# against the cells it reads, then the kept overlap model against llama.cpp's own loop with
# every pass timed by width (bench/pasta_vs_llamacpp.py), then what that says about the floor.
cd /work/main
export HF_HUB_OFFLINE=1
.venv/bin/python runs/i48s11/nkv_steps.py runs/i48s11/nkv_steps.json 25 2>&1 | grep -v "^llama\|^load" || exit 1
.venv/bin/python bench/pasta_vs_llamacpp.py -p /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 16 \
  -o bench/results/engine_step/vs_llamacpp_overlap_r3_widths.json 2>&1 | grep -v "^llama\|^load\|Loading" || exit 1
.venv/bin/python runs/i48s11/floor.py bench/results/engine_step/vs_llamacpp_overlap_r3_widths.json
echo finished
