#!/bin/bash
# TIP vs dense at 2K-token traces on llama.cpp (flash off), streams compacted (the default)
# and not (compact_holes raised past any stream), one after another in one script, quiet
# (the background distill paused)
cd /work/main
pkill -STOP -f "pasta distill"
run() {  # $1: output name, $2: compact_holes, $3: policies
  { time SOLM_LLAMA_FLASH_ATTN=off .venv/bin/python -c "
import sys
from solm.llamacpp.tip import LlamaKV
LlamaKV.compact_holes = int(sys.argv[1])
made = []
real_init = LlamaKV.__init__
def init(self, ctx):
    real_init(self, ctx)
    made.append(self)
LlamaKV.__init__ = init
from solm.cli.tip import app
try:
    app(sys.argv[2:], standalone_mode=False)
finally:
    print('compactions per context:', [kv.compactions for kv in made])" $2 bench -t runs/tip/traces2k.jsonl --max-tokens 2000 --policies $3 \
     --engine llama.cpp --batch-size 8 --budget 1024 --registers 16 -o runs/i48s6/$1.json -q ; } \
     > runs/i48s6/$1.log 2>&1
}
run tip2k_compacted 256 dense,tip
run tip2k_uncompacted 1000000000 tip
pkill -CONT -f "pasta distill"
echo done > runs/i48s6/tip2k_compact.done
