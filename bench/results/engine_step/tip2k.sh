#!/bin/bash
# TIP vs dense at 2K-token traces, llama.cpp (flash off: faster at long streams here) and
# onnxruntime (q4), one run each, quiet (distill paused)
cd /work/main
pkill -STOP -f "pasta distill"
{ time SOLM_LLAMA_FLASH_ATTN=off .venv/bin/tip bench -t runs/tip/traces2k.jsonl --max-tokens 2000 --policies dense,tip \
   --engine llama.cpp --batch-size 8 --budget 1024 --registers 16 -o runs/i48s5/tip2k_llama.json -q ; } > runs/i48s5/tip2k_llama.log 2>&1
{ time .venv/bin/tip bench -t runs/tip/traces2k.jsonl --max-tokens 2000 --policies dense,tip \
   --engine onnxruntime --onnx-type q4 --batch-size 8 --budget 1024 --registers 16 -o runs/i48s5/tip2k_ort.json -q ; } > runs/i48s5/tip2k_ort.log 2>&1
pkill -CONT -f "pasta distill"
echo done > runs/i48s5/tip2k.done
