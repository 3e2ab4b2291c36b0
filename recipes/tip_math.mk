# TIP on MATH on a CPU (DeepMath solutions annotated by the rules; GRPO on short GSM8K
# problems; MATH-500), and the TIP runtime benchmark on long synthetic traces. Included by
# the Makefile.
.PHONY: tip-math-traces-cpu tip-math-sft-cpu tip-math-kept-cpu tip-math-grpo-cpu tip-math-eval-cpu \
	bench-tip-cpu

# TIP on MATH on a CPU, each step on files and resumable (rerun after a kill):
# 1,000 MATH solutions (the shared sample: MATH's test set minus MATH-500) annotated with
# TIP_REGISTERS registers by the rules; TIP-SFT and the Dense baseline (same traces, registers
# removed), LoRA, on the first 500 (1,000 took ~19 s a step on a 2-core CPU: ~38 min, over
# the 30-minute mark; a micro-batch of 8 rows was slower still, 41 s a step); GRPO of the TIP
# model on short GSM8K train problems; evaluation on MATH-500.
TIP_DIR       ?= runs/tip
TIP_REGISTERS ?= 2
TIP_SFT_ARGS  ?= --limit 500 --lora-r 8 --lr 1e-3 --epochs 1 --batch-size 8 --eval-rows 16 --save-every 25 -q
TIP_GRPO_ARGS ?= --lora-r 8 --lr 1e-4 --max-steps 20 --batch-size 16 --num-generations 4 \
	--micro-batch-size 4 --max-completion-length 256 --kv-penalty 0.1 --save-every 5 --logging-steps 1 -q
$(TIP_DIR)/math_traces.jsonl: | $(DATA)/deepmath.jsonl
	$(BIN)/tip annotate -i $(DATA)/deepmath.jsonl -o $@ --registers $(TIP_REGISTERS) \
		--min-step-tokens 12 --limit 1000 -q

tip-math-traces-cpu: setup $(TIP_DIR)/math_traces.jsonl  ## 1,000 MATH solutions annotated with registers

tip-math-sft-cpu: setup $(TIP_DIR)/math_traces.jsonl  ## TIP-SFT and Dense-SFT on them
	grep -qs '"complete": true' $(TIP_DIR)/tip-sft/solm.json || $(BIN)/tip sft \
		--data $(TIP_DIR)/math_traces.jsonl --registers $(TIP_REGISTERS) --out $(TIP_DIR)/tip-sft $(TIP_SFT_ARGS)
	grep -qs '"complete": true' $(TIP_DIR)/dense-sft/solm.json || $(BIN)/tip sft \
		--data $(TIP_DIR)/math_traces.jsonl --registers $(TIP_REGISTERS) --strip-registers \
		--out $(TIP_DIR)/dense-sft $(TIP_SFT_ARGS)

# The MATH recipe's TIP model packed as a kept model into TIP_DIR/kept (the package's
# tip-sft-cpu is the tracking one: recipes/tip_tracking.mk).
tip-math-kept-cpu: setup $(TIP_DIR)/math_traces.jsonl  ## the MATH TIP model packed into TIP_DIR/kept
	$(call trained,$(TIP_DIR)/tip-sft) $(BIN)/tip sft --data $(TIP_DIR)/math_traces.jsonl \
		--registers $(TIP_REGISTERS) --out $(TIP_DIR)/tip-sft $(TIP_SFT_ARGS)
	rm -rf $(TIP_DIR)/kept/tip-sft-cpu
	$(PACK) '$(TIP_DIR)/tip-sft', '$(TIP_DIR)/kept/tip-sft-cpu')"
	du -sh $(TIP_DIR)/kept/tip-sft-cpu

$(TIP_DIR)/gsm8k_short.jsonl: | $(DATA)/gsm8k_train.jsonl
	$(BIN)/python bench/gsm8k_short.py --source $(DATA)/gsm8k_train.jsonl --max-lines 2 --n 400 --out $@

tip-math-grpo-cpu: setup $(TIP_DIR)/gsm8k_short.jsonl  ## GRPO of the MATH TIP model on short GSM8K problems
	grep -qs '"complete": true' $(TIP_DIR)/tip-grpo/solm.json || $(BIN)/tip grpo \
		--data $(TIP_DIR)/gsm8k_short.jsonl --model $(TIP_DIR)/tip-sft --registers $(TIP_REGISTERS) \
		--out $(TIP_DIR)/tip-grpo $(TIP_GRPO_ARGS)

# 20 MATH-500 problems x 2 samples, up to 512 tokens: dense (the Dense-SFT model),
# streamingllm and h2o at 128 / 256 / 512 tokens (same model), tip (the TIP model).
TIP_EVAL_MODEL ?= $(TIP_DIR)/tip-sft
tip-math-eval-cpu: setup $(DATA)/math500.jsonl  ## MATH-500: dense, streamingllm, h2o, tip
	$(BIN)/tip eval run -o $(TIP_DIR)/eval --data $(DATA)/math500.jsonl --limit 20 --samples 2 \
		--max-new-tokens 512 --model $(TIP_EVAL_MODEL) --dense-model $(TIP_DIR)/dense-sft \
		--budgets 128,256,512 --page-size 16 -q
	$(BIN)/tip eval report $(TIP_DIR)/eval -q

# The TIP runtime benchmark (~1 h 45 min on 2 cores): 16 synthetic register traces of
# 4,000 tokens replayed with dense and tip at batch 16. See README "TIP runtime".
bench-tip-cpu: setup $(DATA)/deepmath.jsonl  ## tip bench on 16 synthetic 4,000-token traces
	$(BIN)/tip traces --source $(DATA)/deepmath.jsonl -o runs/tip/traces.jsonl --n 16 --min-tokens 4000
	$(BIN)/tip bench --config configs/tip_bench_cpu.yaml --traces runs/tip/traces.jsonl \
		--max-tokens 4000 --out runs/tip/bench.json
