# TIP on the recall task: the problems and traces, the kept sixteen-register TIP model
# (tip-sft-16-cpu, rebuilt from nothing by its target), its Dense baseline, and their
# evaluation against heuristics that keep the prompt. Included by the Makefile.
.PHONY: tip-recall-traces-cpu tip-sft-16-cpu tip-dense-recall-cpu tip-recall-eval-cpu \
	tip-bench-recall-cpu

# `solm data make recall`: tracking's operations plus `a = b from step k`, so some steps
# must stay alive across many later ones while the rest die at once, decided by the problem.
# Problems of 10-24 operations (at most ~1,150 tokens with the prompt); seed 1 trains, seed
# 2 is held out; the solver's traces annotated over RECALL_REGISTERS
# registers by the `needs` rule (a step keeps its register while a later step reads it);
# TIP-SFT and Dense-SFT (the same traces, registers removed) on the same RECALL_ROWS rows,
# LoRA r 32 (about 80 s a step of 8 rows on a 2-core CPU: 49 min). Resumable: rerun after a kill.
RECALL_DIR       ?= runs/tip-recall
RECALL_REGISTERS ?= 16
RECALL_RULE      ?= needs
RECALL_ROWS      ?= 320
RECALL_OPS       ?= --min-ops 10 --max-ops 24
RECALL_SFT_ARGS  ?= --limit $(RECALL_ROWS) --registers $(RECALL_REGISTERS) --lora-r 32 \
	--lr 1e-3 --epochs 1 --batch-size 8 --micro-batch-size 4 --max-len 1200 --eval-rows 16 \
	--save-every 5 -q
$(RECALL_DIR)/train.jsonl: | setup
	$(BIN)/solm data make recall -o $@ --n 2000 --seed 1 $(RECALL_OPS) -q
$(RECALL_DIR)/test.jsonl: | setup
	$(BIN)/solm data make recall -o $@ --n 300 --seed 2 $(RECALL_OPS) -q
$(RECALL_DIR)/traces.jsonl: | $(RECALL_DIR)/train.jsonl
	$(BIN)/tip annotate -i $(RECALL_DIR)/train.jsonl -o $@ --registers $(RECALL_REGISTERS) \
		--rule $(RECALL_RULE) --min-step-tokens 1 -q

tip-recall-traces-cpu: setup $(RECALL_DIR)/traces.jsonl $(RECALL_DIR)/test.jsonl  ## recall problems (train, test) and the sixteen-register traces

tip-sft-16-cpu: setup $(RECALL_DIR)/traces.jsonl  ## the kept sixteen-register TIP model (recall task), from nothing
	$(call trained,$(RECALL_DIR)/tip-sft) $(BIN)/tip sft --data $(RECALL_DIR)/traces.jsonl \
		--out $(RECALL_DIR)/tip-sft $(RECALL_SFT_ARGS)
	rm -rf $(ARTIFACTS)/tip-sft-16-cpu
	$(PACK) '$(RECALL_DIR)/tip-sft', '$(ARTIFACTS)/tip-sft-16-cpu')"
	du -sh $(ARTIFACTS)/tip-sft-16-cpu

tip-dense-recall-cpu: setup $(RECALL_DIR)/traces.jsonl  ## the Dense baseline of the recall task (the same traces, no registers)
	$(call trained,$(RECALL_DIR)/dense-sft) $(BIN)/tip sft --data $(RECALL_DIR)/traces.jsonl \
		--strip-registers --out $(RECALL_DIR)/dense-sft $(RECALL_SFT_ARGS)

# The evaluation: the first RECALL_EVAL_N held-out problems (seed 2), greedy, pages of 16
# tokens: tip, dense, and on the Dense model StreamingLLM (four sinks), the prompt-keeping
# window (streaming-prompt: the whole prompt plus a recent window) and H2O at
# RECALL_BUDGETS tokens, prompt included (TIP's measured mean live KV, 323, and twice it).
# Resumable; the report: accuracy with 95% intervals, live KV, throughput and the
# accuracy-vs-live-KV plot.
RECALL_EVAL_N   ?= 200
RECALL_BUDGETS  ?= 320,640
RECALL_POLICIES ?= tip,dense,streamingllm,streaming-prompt,h2o
tip-recall-eval-cpu: setup tip-dense-recall-cpu $(RECALL_DIR)/test.jsonl  ## TIP, Dense and the heuristics on held-out recall problems
	$(BIN)/tip eval run -o $(RECALL_DIR)/eval --data $(RECALL_DIR)/test.jsonl \
		--model tip-sft-16-cpu --dense-model $(RECALL_DIR)/dense-sft \
		--policies $(RECALL_POLICIES) --budgets $(RECALL_BUDGETS) --samples 1 \
		--temperature 0 --max-new-tokens 1000 --limit $(RECALL_EVAL_N) --batch-size 16 \
		--page-size 16 --engine auto -q
	$(BIN)/tip eval report $(RECALL_DIR)/eval -o $(RECALL_DIR)/eval/report

# Long traces where the cache is the cost: recall problems of 170-180 operations (seed 3:
# no training or test row; 7.7-8.3K tokens with the prompt), annotated as the training
# traces, then `tip bench` TIP against dense on llama.cpp, each policy on a context of its
# own, side by side in one run and again in the other order (2 traces, 2 at a time).
RECALL_BENCH_DIR ?= runs/tip-recall-bench
$(RECALL_BENCH_DIR)/traces_8k.jsonl: | setup
	$(BIN)/solm data make recall -o $(RECALL_BENCH_DIR)/8k.jsonl --n 8 --seed 3 --min-ops 170 \
		--max-ops 180 -q
	$(BIN)/tip annotate -i $(RECALL_BENCH_DIR)/8k.jsonl -o $@ --registers $(RECALL_REGISTERS) \
		--rule $(RECALL_RULE) --min-step-tokens 1 -q

tip-bench-recall-cpu: $(RECALL_BENCH_DIR)/traces_8k.jsonl  ## TIP against Dense on 8K-token recall traces on llama.cpp, both orders
	for P in dense,tip tip,dense; do \
		$(BIN)/tip bench -t $(RECALL_BENCH_DIR)/traces_8k.jsonl -m tip-sft-16-cpu --policies $$P \
			--engine llama.cpp --registers $(RECALL_REGISTERS) --limit 2 --batch-size 2 \
			--page-size 16 -o $(RECALL_BENCH_DIR)/bench_8k_$${P%%,*}_first.json || exit 1; done
