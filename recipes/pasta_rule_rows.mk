# PASTA on rule-annotated rows of other writers' answers (Dolly, OpenOrca): the earlier
# recipe, its LoRA models, the overlap layout beside Pred-10X, the preference rounds and
# their frontier. Its models are packed into SFT_KEPT, not into the package (the kept
# PASTA models are recipes/pasta_own_answers.mk's). Included by the Makefile.
.PHONY: bench-pasta sft-pasta-cpu sft-lora-cpu sft-overlap-cpu overlap-vs-pred10x \
	pdiff-sft-overlap-cpu pdiff-overlap-vs-pred10x pasta-agreement pasta-rounds pasta-frontier \
	rule-rows-bonbon-cpu

# The PASTA runtime benchmark (long on a 2-core CPU): see README "PASTA runtime figures".
bench-pasta: setup $(DATA)/alpaca_eval_gpt4.jsonl  ## the PASTA replay benchmark (pasta bench) on rule-annotated AlpacaEval answers
	$(BIN)/pasta annotate -i $(DATA)/alpaca_eval_gpt4.jsonl \
		-o runs/bench/gpt4_rules.jsonl -q
	$(BIN)/pasta bench -a runs/bench/gpt4_rules.jsonl --rows 40 $(BENCH_ARGS) \
		--out runs/bench/pasta_replay.jsonl

# The PASTA SFT run (~25 min training + ~20 min decoding per model on 2 cores):
# rule-annotate dolly + OpenOrca, keep rows with >= 2 promises plus 200 plain rows, Pasta-SFT
# and Baseline-SFT on the same rows, decode 50 AlpacaEval prompts with each. See README.
SFT_DIR  ?= runs/sft
SFT_ARGS ?= --lr 3e-4 --control-token-lr-scale 30 --batch-size 4 --epochs 1 --max-len 384 --eval-rows 16 --save-every 40 --warmup-ratio 0.05 --control-token-loss-weight 5
# today's rows: the first 5,000 Dolly rows and the first 284 SlimOrca rows (the shared copies
# were a 5,000-row Dolly sample and 284 OpenOrca GPT-4 rows)
DOLLY_ROWS ?= 5000
ORCA_ROWS  ?= 284
$(SFT_DIR)/sft_rows.jsonl: | setup $(DATA)/dolly.jsonl $(DATA)/slimorca.jsonl
	mkdir -p $(SFT_DIR)
	$(BIN)/pasta annotate -i $(DATA)/dolly.jsonl --limit $(DOLLY_ROWS) -o $(SFT_DIR)/dolly_rules.jsonl -q
	$(BIN)/pasta annotate -i $(DATA)/slimorca.jsonl --limit $(ORCA_ROWS) -o $(SFT_DIR)/orca_rules.jsonl -q
	$(BIN)/pasta mix $(SFT_DIR)/dolly_rules.jsonl $(SFT_DIR)/orca_rules.jsonl --plain 200 -o $@ -q

sft-pasta-cpu: setup $(SFT_DIR)/sft_rows.jsonl $(ALPACA)  ## Pasta-SFT and Baseline-SFT (full) on rule-annotated Dolly + OpenOrca rows
	$(BIN)/pasta sft --data $(SFT_DIR)/sft_rows.jsonl --out $(SFT_DIR)/pasta-sft $(SFT_ARGS)
	$(BIN)/pasta decode --model $(SFT_DIR)/pasta-sft --prompts $(ALPACA) --limit 50 \
		--out $(SFT_DIR)/decode_pasta.jsonl --max-new-tokens 384 --dtype fp32 --repetition-penalty 1.2 -q
	$(BIN)/pasta sft --data $(SFT_DIR)/sft_rows.jsonl --out $(SFT_DIR)/baseline-sft --strip-annotations $(SFT_ARGS)
	$(BIN)/pasta decode --model $(SFT_DIR)/baseline-sft --prompts $(ALPACA) --limit 50 \
		--out $(SFT_DIR)/decode_baseline.jsonl --max-new-tokens 384 --dtype fp32 --repetition-penalty 1.2 -q
	$(BIN)/pasta stats $(SFT_DIR)/decode_pasta.jsonl $(SFT_DIR)/decode_baseline.jsonl

# The LoRA artifacts: the same rows, LoRA rank 8 (with the control tokens' embedding rows
# trained as their own parameters), Pasta-SFT and Baseline-SFT. The adapters (< 20 MB each)
# are copied into the package, where the aliases pasta-sft-cpu / baseline-sft-cpu load them
# (without a tokenizer: loading rebuilds it from the parent's, as training built it).
# Since the own-answer recipe the package's pasta-sft-cpu / baseline-sft-cpu are the own-answer models
# (`make own-kept-cpu`); these, the last wave's, are packed into SFT_KEPT (copy a folder into
# solm/artifacts/ to load it by that name).
SFT_KEPT ?= $(SFT_DIR)/kept
LORA_ARGS ?= --lora-r 8 --lr 1e-3 --batch-size 4 --epochs 1 --max-len 384 --eval-rows 16 --save-every 40 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
sft-lora-cpu: setup $(SFT_DIR)/sft_rows.jsonl  ## the same, LoRA r 8, packed into SFT_KEPT
	$(BIN)/pasta sft --data $(SFT_DIR)/sft_rows.jsonl --out $(SFT_DIR)/pasta-sft-lora $(LORA_ARGS)
	$(BIN)/pasta sft --data $(SFT_DIR)/sft_rows.jsonl --out $(SFT_DIR)/baseline-sft-lora --strip-annotations $(LORA_ARGS)
	$(PACK) '$(SFT_DIR)/pasta-sft-lora', '$(SFT_KEPT)/pasta-sft-cpu')"
	$(PACK) '$(SFT_DIR)/baseline-sft-lora', '$(SFT_KEPT)/baseline-sft-cpu')"
	# their decoding defaults travel with them (without the penalty the 135M models loop)
	for m in pasta-sft-cpu baseline-sft-cpu; do printf '{\n  "do_sample": false,\n  "repetition_penalty": 1.2\n}\n' \
		> $(SFT_KEPT)/$$m/generation_config.json; done
	du -sh $(SFT_KEPT)/*

# The overlap layout beside Pred-10X: pasta-sft-cpu's recipe on today's rows, trained
# with --positions overlap (threads overlap the main thread's positions, so llama.cpp can
# decode them; packed into SFT_KEPT: the package's pasta-sft-overlap-cpu is `make
# own-kept-cpu`'s since the own-answer recipe) and with --positions pred10x; then both
# measured side by side on the first
# $(OVERLAP_PROMPTS) AlpacaEval prompts against baseline-sft-cpu (greedy, batched, torch),
# and the overlap model on llama.cpp against the baseline on llama.cpp (batch 1, timed).
OVERLAP_DIR ?= runs/overlap
OVERLAP_PROMPTS ?= 30
OVERLAP_EVAL ?= --max-new-tokens 384 --repetition-penalty 1.2 --no-judge -q
sft-overlap-cpu: setup $(SFT_DIR)/sft_rows.jsonl  ## the LoRA recipe in the overlap and Pred-10X layouts
	$(call trained,$(SFT_DIR)/pasta-sft-overlap) $(BIN)/pasta sft --data $(SFT_DIR)/sft_rows.jsonl \
		--out $(SFT_DIR)/pasta-sft-overlap $(LORA_ARGS) --positions overlap
	$(call trained,$(SFT_DIR)/pasta-sft-pred10x) $(BIN)/pasta sft --data $(SFT_DIR)/sft_rows.jsonl \
		--out $(SFT_DIR)/pasta-sft-pred10x $(LORA_ARGS) --positions pred10x
	$(PACK) '$(SFT_DIR)/pasta-sft-overlap', '$(SFT_KEPT)/pasta-sft-overlap-cpu')"
	printf '{\n  "do_sample": false,\n  "repetition_penalty": 1.2\n}\n' \
		> $(SFT_KEPT)/pasta-sft-overlap-cpu/generation_config.json

overlap-vs-pred10x: setup $(ALPACA)  ## both layouts against Baseline-SFT (batched; timed on llama.cpp and torch)
	$(BIN)/pasta eval run -o $(OVERLAP_DIR)/batched --prompts $(ALPACA) --limit $(OVERLAP_PROMPTS) \
		--method sequential:baseline-sft=baseline-sft-cpu --method pasta:pred10x=$(SFT_DIR)/pasta-sft-pred10x \
		--method pasta:overlap=$(SFT_DIR)/pasta-sft-overlap --batch-size 16 $(OVERLAP_EVAL)
	$(BIN)/pasta eval run -o $(OVERLAP_DIR)/llama-timed --prompts $(ALPACA) --limit 16 \
		--method sequential:baseline-sft=baseline-sft-cpu --method pasta:overlap=$(SFT_DIR)/pasta-sft-overlap \
		--engine llama.cpp $(OVERLAP_EVAL)
	$(BIN)/pasta eval run -o $(OVERLAP_DIR)/torch-timed --prompts $(ALPACA) --limit 16 \
		--method sequential:baseline-sft=baseline-sft-cpu --method pasta:overlap=$(SFT_DIR)/pasta-sft-overlap \
		$(OVERLAP_EVAL)

# Planned Diffusion in the overlap layout beside Pred-10X: pdiff-cpu's recipe on
# today's rows, trained with --positions overlap (llama.cpp decodes it; packed into
# PDIFF_OVERLAP_DIR/kept: the package's pdiff-overlap-cpu is `make own-pdiff-kept-cpu`'s since
# own-answer recipe) and --positions pred10x; both on the first $(OVERLAP_PROMPTS) AlpacaEval prompts against
# baseline-sft-cpu (greedy, batched 16, torch, steps ratio 0.5), then the overlap model and the
# baseline timed at batch 1 on llama.cpp. Resumable: rerun after a kill.
PDIFF_OVERLAP_DIR ?= runs/pdiff-overlap
pdiff-sft-overlap-cpu: setup $(SFT_DIR)/sft_rows.jsonl  ## Planned Diffusion on the same rows in both layouts
	$(call trained,$(PDIFF_OVERLAP_DIR)/overlap) $(BIN)/pdiff sft --data $(SFT_DIR)/sft_rows.jsonl \
		--out $(PDIFF_OVERLAP_DIR)/overlap $(PDIFF_SFT_ARGS) --positions overlap
	$(call trained,$(PDIFF_OVERLAP_DIR)/pred10x) $(BIN)/pdiff sft --data $(SFT_DIR)/sft_rows.jsonl \
		--out $(PDIFF_OVERLAP_DIR)/pred10x $(PDIFF_SFT_ARGS) --positions pred10x
	$(PACK) '$(PDIFF_OVERLAP_DIR)/overlap', '$(PDIFF_OVERLAP_DIR)/kept/pdiff-overlap-cpu')"
	printf '{\n  "do_sample": false,\n  "repetition_penalty": 1.2\n}\n' \
		> $(PDIFF_OVERLAP_DIR)/kept/pdiff-overlap-cpu/generation_config.json

pdiff-overlap-vs-pred10x: setup $(ALPACA)  ## both Planned Diffusion layouts against Baseline-SFT
	$(BIN)/pasta eval run -o $(PDIFF_OVERLAP_DIR)/batched --prompts $(ALPACA) --limit $(OVERLAP_PROMPTS) \
		--method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:pred10x=$(PDIFF_OVERLAP_DIR)/pred10x,steps_ratio=0.5 \
		--method pdiff:overlap=pdiff-overlap-cpu,steps_ratio=0.5 --batch-size 16 $(OVERLAP_EVAL)
	$(BIN)/pasta eval run -o $(PDIFF_OVERLAP_DIR)/llama-timed --prompts $(ALPACA) --limit 16 \
		--method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:overlap=pdiff-overlap-cpu,steps_ratio=0.5 --engine llama.cpp $(OVERLAP_EVAL)

# The preference rounds (PASTA's second stage) on a CPU: `pasta prefs` samples the
# 40 held-out Dolly prompts (N = 4, judged by $(JUDGE) unless LAMBDA=0), `pasta bonbon` trains
# on its pairs (LoRA on the round's parent; lr above the thesis' 5e-7, which does not move a
# 135M model in 40 pairs), ROUNDS times, each round starting from the last. Samples are
# scored by their own parallel speedup (--speed own): the thesis' Baseline-relative speedup
# taught the 135M model to write less (README "Preference rounds"). Resumable: rerun
# the same target after a kill. `make pasta-rounds LAMBDA=inf` needs $(PREFS_DIR)/agreement.json
# (`make pasta-agreement ANNOTATIONS=...`, the llama-2-7b-chat vs text-davinci-003 AlpacaEval
# annotations: results/llama-2-7b-chat-hf/alpaca_eval_gpt4/annotations.json of
# github.com/tatsu-lab/alpaca_eval).
PREFS_DIR   ?= runs/prefs
LAMBDA      ?= 0
ROUNDS      ?= 2
START_MODEL ?= pasta-sft-cpu
PREFS_ARGS  ?= -n 4 --max-new-tokens 256 --speed own -q
BONBON_ARGS ?= --lora-r 8 --lr 2e-4 --epochs 2 --batch-size 4 --eval-rows 6 --eval-every 4 --save-every 10 -q
ANNOTATIONS ?= $(DATA)/alpaca_eval_annotations_llama2_vs_davinci003.jsonl
RUN_TAG     ?= lambda-$(LAMBDA)
BASELINE_FILE ?=
$(PREFS_DIR)/dolly_heldout.jsonl: | $(SFT_DIR)/sft_rows.jsonl $(DATA)/dolly.jsonl $(ALPACA)
	$(BIN)/python bench/heldout_prompts.py --prompts $(DATA)/dolly.jsonl --trained $(SFT_DIR)/sft_rows.jsonl \
		--annotated $(SFT_DIR)/dolly_rules.jsonl --n 40 --exclude $(ALPACA) --out $@

pasta-agreement: setup  ## the judge's agreement with AlpacaEval's annotations
	$(BIN)/pasta eval agreement --annotations $(ANNOTATIONS) --judge $(JUDGE) --limit 100 \
		-o $(PREFS_DIR)/agreement.json -q

pasta-rounds: setup $(PREFS_DIR)/dolly_heldout.jsonl  ## ROUNDS preference rounds (pasta prefs + pasta bonbon) from START_MODEL
	parent=$(START_MODEL); agreement=""; test -f $(PREFS_DIR)/agreement.json && agreement="--judge-agreement $(PREFS_DIR)/agreement.json"; \
	for r in $$(seq 1 $(ROUNDS)); do \
		d=$(PREFS_DIR)/$(RUN_TAG)/round-$$r; \
		base=""; if [ -n "$(BASELINE_FILE)" ]; then base="--baseline $(BASELINE_FILE)"; \
		elif [ $$r -gt 1 ]; then base="--baseline $(PREFS_DIR)/$(RUN_TAG)/round-1/prefs/baseline.jsonl"; fi; \
		$(BIN)/pasta prefs -p $(PREFS_DIR)/dolly_heldout.jsonl -m $$parent -o $$d/prefs $$base \
			--quality-weight $(LAMBDA) --judge $(JUDGE) $$agreement --seed $$r $(PREFS_ARGS) || exit 1; \
		test -f $$d/bonbon/solm.json && grep -q '"complete": true' $$d/bonbon/solm.json || \
			$(BIN)/pasta bonbon --data $$d/prefs/pairs.jsonl --model $$parent --out $$d/bonbon $(BONBON_ARGS) || exit 1; \
		parent=$$d/bonbon; \
	done

# The frontier (after pasta-rounds at LAMBDA=0 and LAMBDA=inf): 30 AlpacaEval prompts, greedy,
# every round's model against Baseline-SFT with the SFT model (also the APAR baseline on a
# CPU) and SoT, decoded in batches (theoretical speedups; wall times need solo decodes:
# `pasta eval run` without --batch-size), judged by $(JUDGE); the report draws win rate
# against speedup, one point per lambda and round. Then the final lambda-inf model judged
# against the starting model, and bench/bonbon_signal.py's paired intervals.
FRONTIER    ?= $(PREFS_DIR)/frontier
FRONT_TAGS  ?= lambda-0 lambda-inf
FRONT_MODELS = $(foreach T,$(FRONT_TAGS),$(foreach R,$(shell seq 1 $(ROUNDS)),--method apar:$(T)-r$(R)=$(PREFS_DIR)/$(T)/round-$(R)/bonbon))
pasta-frontier: setup $(ALPACA)  ## every round's model against Baseline-SFT: win rate against speedup
	$(BIN)/pasta eval run -o $(FRONTIER) --prompts $(ALPACA) --limit 30 \
		--method sequential:baseline-sft=baseline-sft-cpu --baseline baseline-sft \
		--method sot=smollm2-135m --method apar:pasta-sft=$(START_MODEL) $(FRONT_MODELS) \
		--judge $(JUDGE) --batch-size 16 --max-new-tokens 384 -q
	$(BIN)/pasta eval report $(FRONTIER) -o $(FRONTIER)/report
	$(if $(filter lambda-inf,$(FRONT_TAGS)),$(BIN)/pasta judge --baseline $(FRONTIER)/outputs/pasta-sft.jsonl \
		--model $(FRONTIER)/outputs/lambda-inf-r$(ROUNDS).jsonl -o $(FRONTIER)/inf_vs_start.jsonl --judge $(JUDGE) -q && \
	$(BIN)/pasta eval winrate -a $(FRONTIER)/inf_vs_start.jsonl > $(FRONTIER)/inf_vs_start_winrate.json)
	$(BIN)/python bench/bonbon_signal.py --run $(FRONTIER) --baseline baseline-sft --start pasta-sft \
		$(foreach T,$(FRONT_TAGS),--final $(T)-r$(ROUNDS)) \
		$(foreach T,$(FRONT_TAGS),$(foreach R,$(shell seq 1 $(ROUNDS)),--train-log $(PREFS_DIR)/$(T)/round-$(R)/bonbon)) \
		--out $(FRONTIER)/signal.json

# Keep a round's model as pasta-bonbon-cpu in SFT_KEPT (when it is faster than pasta-sft-cpu
# at a well-formed rate that is not lower: see README "Preference rounds"): its adapter chain
# flattened into one LoRA adapter over pasta-sft-cpu (rank 16), packed at rank 12 (SVD;
# logits within 0.003 of rank 16) with int8 factors (3.9 MB), into SFT_KEPT: the last wave's
# model (the package's pasta-bonbon-cpu is `make own-kept-cpu`'s since the own-answer recipe).
KEEP ?= $(PREFS_DIR)/lambda-0/round-$(ROUNDS)/bonbon
rule-rows-bonbon-cpu: setup  ## a round's model flattened and packed as pasta-bonbon-cpu into SFT_KEPT
	rm -rf $(SFT_KEPT)/pasta-bonbon-cpu $(PREFS_DIR)/pasta-bonbon-flat
	$(BIN)/python -c "from solm.core.adapters import flatten; flatten('$(KEEP)', 'pasta-sft-cpu', '$(PREFS_DIR)/pasta-bonbon-flat')"
	$(PACK) '$(PREFS_DIR)/pasta-bonbon-flat', '$(SFT_KEPT)/pasta-bonbon-cpu', max_rank=12)"
	du -sh $(SFT_KEPT)/pasta-bonbon-cpu
