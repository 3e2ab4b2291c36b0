# TIP on the tracking task: the problems and traces, the kept TIP models (tip-sft-cpu,
# tip-dense-cpu, tip-grpo-cpu, each rebuilt from nothing by its target), their evaluation
# and the 8K-token bench. Included by the Makefile.
.PHONY: tip-traces-cpu tip-sft-cpu tip-dense-cpu tip-eval-cpu tip-bench-tracking-cpu \
	tip-grpo-cpu tip-grpo-eval-cpu

# TIP on a task the embedded model learns (`solm data make tracking`: variables changed by a
# list of operations, every older step dead once the next state is written, the prompt
# needed to the end). Problems from seed 1 train, seed 2 is held out; the solver's traces
# annotated with TRACK_REGISTERS registers by the rules (`tip annotate`); TIP-SFT and
# Dense-SFT (the same traces, registers removed) on the same TRACK_ROWS rows, LoRA r 32
# (about 25-35 s a step of 8 rows on a 2-core CPU: 80 steps), each packed into the package
# as a kept model. Resumable: rerun the same target after a kill.
TRACK_DIR       ?= runs/tip-tracking
TRACK_REGISTERS ?= 2
TRACK_ROWS      ?= 640
TRACK_SFT_ARGS  ?= --limit $(TRACK_ROWS) --registers $(TRACK_REGISTERS) --lora-r 32 --lr 1e-3 \
	--epochs 1 --batch-size 8 --micro-batch-size 4 --max-len 1400 --eval-rows 16 --save-every 10 -q
$(TRACK_DIR)/train.jsonl: | setup
	$(BIN)/solm data make tracking -o $@ --n 3000 --seed 1 -q
$(TRACK_DIR)/test.jsonl: | setup
	$(BIN)/solm data make tracking -o $@ --n 300 --seed 2 -q
$(TRACK_DIR)/traces.jsonl: | $(TRACK_DIR)/train.jsonl
	$(BIN)/tip annotate -i $(TRACK_DIR)/train.jsonl -o $@ --registers $(TRACK_REGISTERS) \
		--min-step-tokens 16 -q

tip-traces-cpu: setup $(TRACK_DIR)/traces.jsonl $(TRACK_DIR)/test.jsonl  ## tracking problems (train, test) and the register-annotated traces

tip-sft-cpu: setup $(TRACK_DIR)/traces.jsonl  ## the kept TIP model (two registers), from nothing
	$(call trained,$(TRACK_DIR)/tip-sft) $(BIN)/tip sft --data $(TRACK_DIR)/traces.jsonl \
		--out $(TRACK_DIR)/tip-sft $(TRACK_SFT_ARGS)
	rm -rf $(ARTIFACTS)/tip-sft-cpu
	$(PACK) '$(TRACK_DIR)/tip-sft', '$(ARTIFACTS)/tip-sft-cpu')"
	du -sh $(ARTIFACTS)/tip-sft-cpu

tip-dense-cpu: setup $(TRACK_DIR)/traces.jsonl  ## the kept Dense model (the same traces, no registers)
	$(call trained,$(TRACK_DIR)/dense-sft) $(BIN)/tip sft --data $(TRACK_DIR)/traces.jsonl \
		--strip-registers --out $(TRACK_DIR)/dense-sft $(TRACK_SFT_ARGS)
	rm -rf $(ARTIFACTS)/tip-dense-cpu
	$(PACK) '$(TRACK_DIR)/dense-sft', '$(ARTIFACTS)/tip-dense-cpu')"
	du -sh $(ARTIFACTS)/tip-dense-cpu

# The evaluation on the tracking task: the first 200 held-out problems (seed 2), greedy, up
# to 1,400 tokens, pages of 16 tokens: tip (the TIP model), dense, and StreamingLLM and H2O
# (the Dense model) at TRACK_BUDGETS, TIP's measured mean live KV (257.5 tokens) and half. `auto`
# runs tip, dense and StreamingLLM on llama.cpp and H2O on torch (it reads attention mass);
# run.json names each point's engine. Resumable; the report: accuracy with 95% intervals,
# live KV, peak pages, throughput, decode time, and the accuracy-vs-live-KV plot.
TRACK_BUDGETS ?= 256,128
tip-eval-cpu: setup $(TRACK_DIR)/test.jsonl  ## TIP, Dense, StreamingLLM and H2O on 200 held-out problems
	$(BIN)/tip eval run -o $(TRACK_DIR)/eval --data $(TRACK_DIR)/test.jsonl \
		--model tip-sft-cpu --dense-model tip-dense-cpu \
		--policies tip,dense,streamingllm,h2o --budgets $(TRACK_BUDGETS) --samples 1 \
		--temperature 0 --max-new-tokens 1400 --limit 200 --batch-size 16 --page-size 16 \
		--engine auto -q
	$(BIN)/tip eval report $(TRACK_DIR)/eval -o $(TRACK_DIR)/eval/report

# Long traces where the cache is the cost: tracking problems of 40-44, 85-90 and 170-180
# operations (2K, 4K and 8K tokens with the prompt), annotated as the training traces, then
# `tip bench` TIP against dense on llama.cpp, each policy on a context of its own, side by
# side in one run and again in the other order (4 traces a length, 4 at a time).
TRACK_BENCH_DIR ?= runs/tip-bench
TRACK_BENCH_OPS := 2k:40:44 4k:85:90 8k:170:180
$(TRACK_BENCH_DIR)/traces_%.jsonl: | setup
	$(eval spec := $(filter $*:%,$(TRACK_BENCH_OPS)))
	$(BIN)/solm data make tracking -o $(TRACK_BENCH_DIR)/$*.jsonl --n 8 --seed 3 \
		--min-ops $(word 2,$(subst :, ,$(spec))) --max-ops $(word 3,$(subst :, ,$(spec))) -q
	$(BIN)/tip annotate -i $(TRACK_BENCH_DIR)/$*.jsonl -o $@ --registers $(TRACK_REGISTERS) \
		--min-step-tokens 16 -q

tip-bench-tracking-cpu: $(foreach L,2k 4k 8k,$(TRACK_BENCH_DIR)/traces_$(L).jsonl)  ## TIP against Dense at 2K/4K/8K traces on llama.cpp, both orders
	for L in 2k 4k 8k; do for P in dense,tip tip,dense; do \
		$(BIN)/tip bench -t $(TRACK_BENCH_DIR)/traces_$$L.jsonl -m tip-sft-cpu \
			--policies $$P --engine llama.cpp --registers $(TRACK_REGISTERS) --limit 4 \
			--batch-size 4 --page-size 16 -o $(TRACK_BENCH_DIR)/bench_$${L}_$${P%%,*}_first.json \
			|| exit 1; done; done

# GRPO of the tracking TIP model, reward = correct - c x live KV, on problems where its
# rollouts disagree: at the training lengths (6-30 operations) the SFT model is right in 94-100%
# of rollouts and 0-25% of groups vary (measured), so GRPO has no signal but the KV term. Its
# held-out accuracy falls past 25 operations (0.75 at 25-29, 0.2 at 30+), so GRPO draws
# problems of 22-32 operations (seed 4: no training or test row), 4 rollouts each at
# temperature 1.0, LoRA r 8 over the TIP-SFT model; TRACK_GRPO_STEPS steps of 8 rollouts, a
# checkpoint every step (resumable), packed as the kept tip-grpo-cpu.
TRACK_GRPO_STEPS ?= 10
TRACK_GRPO_ARGS  ?= --registers $(TRACK_REGISTERS) --lora-r 8 --lr 2e-4 \
	--max-steps $(TRACK_GRPO_STEPS) --batch-size 8 --num-generations 4 --micro-batch-size 4 \
	--max-completion-length 1400 --temperature 1.0 --kv-penalty 0.2 --rollout-batch 8 \
	--save-every 1 --logging-steps 1 -q
$(TRACK_DIR)/grpo_problems.jsonl: | setup
	$(BIN)/solm data make tracking -o $@ --n 200 --seed 4 --min-ops 22 --max-ops 32 -q

tip-grpo-cpu: setup $(TRACK_DIR)/grpo_problems.jsonl  ## the kept GRPO model over tip-sft-cpu
	$(call trained,$(TRACK_DIR)/tip-grpo) $(BIN)/tip grpo --data $(TRACK_DIR)/grpo_problems.jsonl \
		--model $(TRACK_DIR)/tip-sft --out $(TRACK_DIR)/tip-grpo $(TRACK_GRPO_ARGS)
	rm -rf $(ARTIFACTS)/tip-grpo-cpu
	$(PACK) '$(TRACK_DIR)/tip-grpo', '$(ARTIFACTS)/tip-grpo-cpu', parent='tip-sft-cpu')"
	du -sh $(ARTIFACTS)/tip-grpo-cpu

# the kept GRPO model on the held-out problems tip-eval-cpu reads (greedy, TIP policy)
tip-grpo-eval-cpu: setup $(TRACK_DIR)/test.jsonl  ## the GRPO model on the held-out problems
	$(BIN)/tip eval run -o $(TRACK_DIR)/eval-grpo --data $(TRACK_DIR)/test.jsonl \
		--model tip-grpo-cpu --policies tip --samples 1 --temperature 0 --max-new-tokens 1400 \
		--limit 200 --batch-size 16 --page-size 16 --engine auto -q
	$(BIN)/tip eval report $(TRACK_DIR)/eval-grpo -o $(TRACK_DIR)/eval-grpo/report
