#!/bin/bash
# issue 48, sixth session: the per-pass cost after the ONNX graph's fusion, and the kept
# PASTA model's demo per engine, on a quiet CPU (nothing else running)
cd /work/main
export HF_HUB_OFFLINE=1
R=bench/results/engine_step
lscpu | grep -E "Model name|^CPU\(s\)" > runs/i48s6/cpu.txt
.venv/bin/solm bench step -m smollm2-135m --engines llama.cpp,onnxruntime,torch --gguf-types q8_0,q4_0 \
  --onnx-types fp32,i8,q4 --dtypes bf16 --ks 1,2,4,8 --repeats 25 -o $R/step_cost_fused_avx512.json > $R/step_cost_fused_avx512.out 2>&1
for e in "onnxruntime i8" "onnxruntime q4" "llama.cpp q4_0" "llama.cpp q8_0"; do
  set -- $e
  if [ $1 = onnxruntime ]; then t="--onnx-type $2"; else t="--gguf-type $2"; fi
  .venv/bin/pasta demo -m pasta-sft-overlap-cpu --engine $1 $t --repeats 3 -o $R/demo_fused_${1%%.*}_$2.json > $R/demo_fused_${1%%.*}_$2.out 2>&1
done
echo done
