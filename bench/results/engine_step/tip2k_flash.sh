#!/bin/bash
cd /work/main
until [ -f runs/i48s5/tip2k.done ]; do sleep 5; done
pkill -STOP -f "pasta distill"
{ time SOLM_LLAMA_FLASH_ATTN=on .venv/bin/tip bench -t runs/tip/traces2k.jsonl --max-tokens 2000 --policies dense,tip \
   --engine llama.cpp --batch-size 8 --budget 1024 --registers 16 -o runs/i48s5/tip2k_llama_flash.json -q ; } > runs/i48s5/tip2k_llama_flash.log 2>&1
pkill -CONT -f "pasta distill"
echo done > runs/i48s5/tip2k_flash.done
