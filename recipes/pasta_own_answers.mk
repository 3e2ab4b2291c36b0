# PASTA on the embedded model's own answers: the rows (pasta distill), the recipes a-e, and
# the kept PASTA models (pasta-sft-cpu, baseline-sft-cpu, pasta-bonbon-cpu and the overlap
# pair: `make own-kept-cpu` rebuilds them from nothing). Included by the Makefile.
.PHONY: own-rows-cpu own-sft-cpu own-select-cpu own-kept-cpu own-kept-overlap-rounds-cpu

# Own-answer rows: the embedded model answers OWN_PROMPTS Dolly instructions
# (AlpacaEval's prompts left out) greedily and OWN_SAMPLED more times, batched on the fastest
# engine; answers cut by the cap or repeating themselves are dropped, the speed-shaped rules
# annotate the rest, an annotation is kept only when its tokens stripped of the tags are the
# sampled ones, rows with a gain >= 1.3 go in as parallel rows beside 40% plain rows
# (`pasta distill`; resumable: rerun after a kill). Pasta-SFT and Baseline-SFT (the same rows,
# tags removed) train on them (recipes below).
# OWN_MATCH keeps the Dolly prompts whose first line asks for lists, steps, ideas, kinds...:
# their answers fork; a one-paragraph answer runs beside nothing (1 paying answer in 32 of the
# first 16 Dolly prompts, bench/results/own_answers). 1,244 of Dolly's 5,000 match.
OWN_DIR      ?= runs/own
OWN_PROMPTS  ?= 1000
OWN_SAMPLED  ?= 1
OWN_MATCH    ?= '^[^\n]*\b(list|give me|what are|ways|ideas|tips|steps|examples|name|brainstorm|reasons|suggest|pros|cons|advantages|benefits|how (do|can|should|to)|types|kinds|things)\b'
# 768 tokens: at 384 the cap cut 43% of the answers (a rerun with a larger cap continues the
# cut answers; of 448 continued to 768, 16% ended: bench/results/own_answers). Recipes a-d
# trained on the 384-token rows, kept in recipes/own/rows_384.jsonl (OWN_ROWS); the 768-token
# rows: OWN_ROWS=$(OWN_DIR)/distill/rows.jsonl.
OWN_ARGS     ?= --max-new-tokens 768 --repetition-penalty 1.2 -q
OWN_ROWS     ?= recipes/own/rows_384.jsonl
own-rows-cpu: setup $(DATA)/dolly.jsonl $(ALPACA)  ## the own-answer rows: the embedded model answers Dolly prompts, rules annotate
	$(BIN)/pasta distill -p $(DATA)/dolly.jsonl --exclude $(ALPACA) --limit $(OWN_PROMPTS) \
		--match $(OWN_MATCH) --sampled $(OWN_SAMPLED) -o $(OWN_DIR)/distill $(OWN_ARGS)

# Recipes on the own rows (OWN_RECIPE picks one), Baseline-SFT on the same rows with tags
# removed, trained with recipe OWN_BASELINE's settings (the same recipe by default: the
# annotations are then the only difference; a, b and c were measured against a's baseline,
# OWN_BASELINE=a), then the selection prompts (AlpacaEval 1-30, batched, greedy) with both:
# `make own-select-cpu OWN_RECIPE=b OWN_BASELINE=a`.
OWN_RECIPE   ?= d
OWN_BASELINE ?= $(OWN_RECIPE)
OWN_a        ?= --lora-r 16 --lr 1e-3 --batch-size 8 --epochs 3 --max-len 1536 --eval-rows 8 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
OWN_b        ?= --lora-r 0 --lr 2e-4 --control-token-lr-scale 30 --batch-size 8 --epochs 3 --max-len 1536 --eval-rows 8 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
# c: b's training on rows whose one-word topics name their paragraph (the rules' default
# now; a and b trained on rows whose topic was the paragraph's first word)
OWN_c        ?= $(OWN_b)
# d: c's training on the rows of 1,000 prompts, one epoch (each training under 45 minutes
# on 2 cores)
OWN_d        ?= --lora-r 0 --lr 2e-4 --control-token-lr-scale 30 --batch-size 8 --epochs 1 --max-len 1536 --eval-rows 16 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
# e: d in the overlap layout (threads overlap the main thread's positions, so llama.cpp can
# decode them); its baseline is d's (positions do not touch a row without tags)
OWN_e        ?= $(OWN_d) --positions overlap
OWN_EVAL_ARGS ?= --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q
$(OWN_DIR)/distill/rows.jsonl:
	$(MAKE) own-rows-cpu
own-sft-cpu: setup $(OWN_ROWS)  ## Pasta-SFT (OWN_RECIPE) and Baseline-SFT (OWN_BASELINE) on the own rows
	$(call trained,$(OWN_DIR)/$(OWN_RECIPE)/pasta-sft) $(BIN)/pasta sft \
		--data $(OWN_ROWS) --out $(OWN_DIR)/$(OWN_RECIPE)/pasta-sft $(OWN_$(OWN_RECIPE))
	$(call trained,$(OWN_DIR)/baseline-$(OWN_BASELINE)) $(BIN)/pasta sft \
		--data $(OWN_ROWS) --out $(OWN_DIR)/baseline-$(OWN_BASELINE) \
		--strip-annotations $(OWN_$(OWN_BASELINE))
own-select-cpu: own-sft-cpu  ## a recipe against its baseline on the 30 selection prompts
	$(BIN)/pasta eval run -o $(OWN_DIR)/$(OWN_RECIPE)/select --prompts $(ALPACA) --limit 30 \
		--method sequential:baseline-sft=$(OWN_DIR)/baseline-$(OWN_BASELINE) \
		--method pasta:pasta-sft=$(OWN_DIR)/$(OWN_RECIPE)/pasta-sft $(OWN_EVAL_ARGS)
	$(BIN)/pasta eval report $(OWN_DIR)/$(OWN_RECIPE)/select -o $(OWN_DIR)/$(OWN_RECIPE)/select/report -q

# The kept PASTA models: recipe d's Pasta-SFT and Baseline-SFT on the own-answer
# rows (OWN_ROWS, committed; `make own-rows-cpu` remakes the distilled rows from nothing),
# then three BoNBoN rounds with the content score on 96 Dolly prompts that gave d no row
# (KEPT_PROMPTS, committed), d's Baseline-SFT answers as the yardstick, 4
# samples each: round 1 over d (λ 1, μ 1, ν 1), round 2 over round 1 (λ 2, μ 3, ν 1), round 3
# over round 2 (its weights, new samples); each full finetune packed into the package as its
# rank-KEPT_RANK difference from the embedded model (int8 factors, files under 5 MB):
# pasta-sft-cpu (d), pasta-bonbon-cpu (round 3),
# baseline-sft-cpu, pasta-sft-overlap-cpu (e: d in the overlap layout, which llama.cpp
# decodes), pasta-bonbon-overlap-cpu (e after the same three rounds). Every step is
# resumable (rerun after a kill); on 2 cores the trainings take ~21 min each, each round's
# sampling ~40 min, each BoNBoN ~8 min.
KEPT_DIR   ?= $(OWN_DIR)/bonbon
KEPT_PROMPTS  ?= recipes/own/bonbon_prompts.jsonl
KEPT_BASELINE ?= recipes/own/bonbon_baseline.jsonl
KEPT_R1    ?= $(KEPT_DIR)/bonbon
KEPT_R2    ?= $(KEPT_DIR)/bonbon3_v1
KEPT_R3    ?= $(KEPT_DIR)/bonbon4
KEPT_RANK  ?= 32
KEPT_PREFS ?= -n 4 --score content --guard-weight 1 --temperature 0.8 --repetition-penalty 1.2 --max-new-tokens 512 --engine torch -q
KEPT_BONBON ?= --lora-r 16 --lr 2e-4 --epochs 1 --batch-size 4 --eval-rows 6 --eval-every 8 --save-every 10 -q
# One BoNBoN round: 4 samples a prompt from model $(1), scored against the baseline's answers,
# into $(2); then BoNBoN on those pairs from $(1) into $(3); quality weight $(4), repeat weight
# $(5), seed $(6). Resumable.
define bonbon_round
$(BIN)/pasta prefs -p $(KEPT_PROMPTS) -m $(1) --baseline $(KEPT_BASELINE) \
	-o $(2) --quality-weight $(4) --repeat-weight $(5) --seed $(6) $(KEPT_PREFS)
$(call trained,$(3)) $(BIN)/pasta bonbon --data $(2)/pairs.jsonl --model $(1) --out $(3) $(KEPT_BONBON)
endef
KEEP_DELTA = $(BIN)/python -c "from solm.core.kept_difference import pack_delta; pack_delta(
own-kept-cpu: setup  ## the kept PASTA models, from nothing (SFT, three BoNBoN rounds, packed)
	$(MAKE) own-sft-cpu OWN_RECIPE=d OWN_BASELINE=d
	$(MAKE) own-sft-cpu OWN_RECIPE=e OWN_BASELINE=d
	test "$$(wc -l < $(KEPT_BASELINE) 2>/dev/null || echo 0)" -ge 96 || $(BIN)/pasta decode \
		-m $(OWN_DIR)/baseline-d --mode sequential -p $(KEPT_PROMPTS) -o $(KEPT_BASELINE) \
		--max-new-tokens 512 --repetition-penalty 1.2 --engine llama.cpp -q
	$(call bonbon_round,$(OWN_DIR)/d/pasta-sft,$(KEPT_DIR)/prefs,$(KEPT_R1),1,1,1)
	$(call bonbon_round,$(KEPT_R1),$(KEPT_DIR)/prefs2,$(KEPT_R2),2,3,2)
	$(call bonbon_round,$(KEPT_R2),$(KEPT_DIR)/prefs4,$(KEPT_R3),2,3,3)
	$(KEEP_DELTA)'$(OWN_DIR)/d/pasta-sft', 'smollm2-135m', '$(ARTIFACTS)/pasta-sft-cpu', $(KEPT_RANK), $(KEPT_RANK))"
	$(KEEP_DELTA)'$(OWN_DIR)/baseline-d', 'smollm2-135m', '$(ARTIFACTS)/baseline-sft-cpu', $(KEPT_RANK), $(KEPT_RANK))"
	$(KEEP_DELTA)'$(KEPT_R3)', 'smollm2-135m', '$(ARTIFACTS)/pasta-bonbon-cpu', $(KEPT_RANK), $(KEPT_RANK))"
	$(KEEP_DELTA)'$(OWN_DIR)/e/pasta-sft', 'smollm2-135m', '$(ARTIFACTS)/pasta-sft-overlap-cpu', $(KEPT_RANK), $(KEPT_RANK))"
	$(MAKE) own-kept-overlap-rounds-cpu
	$(KEEP_DELTA)'$(KEPT_E)/bonbon3', 'smollm2-135m', '$(ARTIFACTS)/pasta-bonbon-overlap-cpu', $(KEPT_RANK), $(KEPT_RANK))"
	for m in pasta-sft-cpu baseline-sft-cpu pasta-bonbon-cpu pasta-sft-overlap-cpu pasta-bonbon-overlap-cpu; do printf '{\n  "do_sample": false,\n  "repetition_penalty": 1.2\n}\n' \
		> $(ARTIFACTS)/$$m/generation_config.json; done
	du -sh $(ARTIFACTS)/*

# The same three BoNBoN rounds (prompts, baseline answers, weights, seeds) on the overlap model
# e: pasta-bonbon-overlap-cpu, the PASTA model whose threads decode on llama.cpp. Resumable.
KEPT_E ?= $(OWN_DIR)/e
own-kept-overlap-rounds-cpu:  ## the three BoNBoN rounds on the overlap model
	$(call bonbon_round,$(KEPT_E)/pasta-sft,$(KEPT_E)/prefs1,$(KEPT_E)/bonbon1,1,1,1)
	$(call bonbon_round,$(KEPT_E)/bonbon1,$(KEPT_E)/prefs2,$(KEPT_E)/bonbon2,2,3,2)
	$(call bonbon_round,$(KEPT_E)/bonbon2,$(KEPT_E)/prefs3,$(KEPT_E)/bonbon3,2,3,3)
