#!/bin/bash
# issue 48: the kept PASTA model (onnxruntime i8) against the baseline on llama.cpp's own loop,
# 16 AlpacaEval prompts, one run; then `make demo`'s command with the default engine (auto)
cd /work/main
export HF_HUB_OFFLINE=1
R=bench/results/engine_step
.venv/bin/python bench/pasta_vs_llamacpp.py -p /work/shared/data/alpaca_eval/alpaca_eval.jsonl --limit 16 \
  --engine onnxruntime --onnx-type i8 --baseline-gguf-type q4_0 --max-new-tokens 256 --repeats 3 \
  -o $R/vs_llamacpp_ort_i8.json > $R/vs_llamacpp_ort_i8.out 2>&1
.venv/bin/pasta demo -o $R/demo_auto_avx512.json > $R/demo_auto_avx512.out 2>&1
echo done
