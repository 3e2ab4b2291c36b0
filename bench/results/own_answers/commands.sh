set -e
A=~/.cache/solm/data/alpaca_eval.jsonl
C="--limit 30 --max-new-tokens 384 --repetition-penalty 1.2 --engine torch --dtype fp32 -q"
.venv/bin/pasta decode -m pasta-sft-overlap-cpu -p $A $C -o runs/i47/guards_on.jsonl
.venv/bin/pasta decode -m pasta-sft-overlap-cpu -p $A $C --no-keep-promises --block-repeats 0 -o runs/i47/guards_off.jsonl
.venv/bin/python bench/side_by_side.py runs/i47/guards_on.jsonl runs/i47/guards_off.jsonl --names guards,no-guards --out runs/i47/guards.json
P="--limit 30 --steps-ratio 0.5 --max-new-tokens 384 -q"
.venv/bin/pdiff decode -m pdiff-cpu -p $A $P -o runs/i47/pdiff_on.jsonl
.venv/bin/pdiff decode -m pdiff-cpu -p $A $P --no-pads-end-chunk -o runs/i47/pdiff_off.jsonl
.venv/bin/python bench/side_by_side.py runs/i47/pdiff_on.jsonl runs/i47/pdiff_off.jsonl --names pads-end-chunk,off --out runs/i47/pdiff.json
