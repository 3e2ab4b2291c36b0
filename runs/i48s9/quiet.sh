#!/bin/bash
# Issue 48 on this CPU, nothing else running: the kept overlap model (now the own-answer e) on
# llama.cpp q4_0 against the Baseline-SFT on llama.cpp's own loop (q4_0); then the new kept
# pasta-bonbon-cpu (round 3) on onnxruntime q8 against the same. 16 prompts, one run each.
cd /work/main
export HF_HUB_OFFLINE=1
A=/work/shared/data/alpaca_eval/alpaca_eval.jsonl
O=bench/results/engine_step
.venv/bin/python bench/pasta_vs_llamacpp.py -p $A --limit 16 --pasta-model pasta-sft-overlap-cpu \
  --baseline-model baseline-sft-cpu --engine llama.cpp --gguf-type q4_0 --baseline-gguf-type q4_0 \
  -o $O/vs_llamacpp_overlap_own_llama_q4.json > $O/vs_llamacpp_overlap_own_llama_q4.out 2>&1
.venv/bin/python bench/pasta_vs_llamacpp.py -p $A --limit 16 --pasta-model pasta-bonbon-cpu \
  --baseline-model baseline-sft-cpu --engine onnxruntime --onnx-type q8 \
  -o $O/vs_llamacpp_bonbon_r3_ort_q8.json > $O/vs_llamacpp_bonbon_r3_ort_q8.out 2>&1
echo finished
