#!/bin/bash
# Planned Diffusion per engine, batch 1, 6 AlpacaEval prompts, quiet (distill paused)
cd /work/main
A=$HOME/.cache/solm/data/alpaca_eval.jsonl
pkill -STOP -f "pasta distill"
for e in "torch" "llama.cpp --gguf-type q8_0" "onnxruntime --onnx-type fp32" "onnxruntime --onnx-type q8"; do
  tag=$(echo $e | tr ' ' '_' | sed 's/--gguf-type_//; s/--onnx-type_//')
  .venv/bin/pdiff decode -m pdiff-overlap-cpu -p $A --limit 6 --max-new-tokens 160 --steps-ratio 0.5 \
     --batch-size 1 --engine $e -o runs/i48s5/pdiff_$tag.jsonl --force -q > runs/i48s5/pdiff_$tag.log 2>&1
done
pkill -CONT -f "pasta distill"
echo done > runs/i48s5/pdiff.done
