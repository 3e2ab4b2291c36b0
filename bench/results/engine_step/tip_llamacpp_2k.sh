#!/bin/bash
# TIP vs dense at 2K-token traces on llama.cpp (q8_0, flash attention off), each policy on a
# fresh llama.cpp context, one run, quiet (any background job paused by the caller)
cd "$(dirname "$0")/../.."
mkdir -p runs/tip2k
{ time SOLM_LLAMA_FLASH_ATTN=off .venv/bin/tip bench -t runs/tip/traces2k.jsonl --max-tokens 2000 \
   --policies dense,tip --engine llama.cpp --batch-size 8 --budget 1024 --registers 16 \
   -o runs/tip2k/tip_llamacpp_2k.json -q ; } > runs/tip2k/tip_llamacpp_2k.log 2>&1
