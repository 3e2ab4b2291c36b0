# Planned Diffusion on a CPU: the rule-row recipe, the exact-length recipe on the own rows
# (the kept pdiff-cpu and pdiff-overlap-cpu: `make own-pdiff-kept-cpu`), the block and
# self-distilled recipes, and the measurements of the chosen one. Included by the Makefile.
.PHONY: pdiff-sft-cpu rule-rows-pdiff-cpu pdiff-exact-cpu own-pdiff-kept-cpu pdiff-recipes-cpu \
	pdiff-recipes-select-cpu pdiff-curve-cpu pdiff-final-cpu pdiff-realized-cpu pdiff-decode-cpu \
	pdiff-eval-cpu pdiff-sweep-cpu

# Planned Diffusion on a CPU, each step on files and resumable (rerun after a kill):
# hybrid AR + diffusion SFT of the embedded model on the rule-annotated rows of the PASTA
# runs (chunks laid out in 10 x N slots), kept as pdiff-cpu; a decode of 30 AlpacaEval
# prompts; the evaluation beside Baseline-SFT (autoregressive) and Pasta-SFT (PASTA's parallel
# threads) on the same prompts, one at a time and timed, eager steps for every method; the
# steps-ratio x confidence-threshold sweep (batched: forward passes, not wall time, per
# content token) drawn against the judge's win rate with its Pareto front.
PDIFF_DIR       ?= runs/pdiff
PDIFF_SFT_ARGS  ?= --lora-r 8 --lr 1e-3 --batch-size 4 --epochs 1 --max-len 512 --eval-rows 16 --save-every 40 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
PDIFF_MODEL     ?= pdiff-cpu
PDIFF_EVAL_ARGS ?= --limit 30 --max-new-tokens 384 --judge $(JUDGE) --no-compile -q
SWEEP_RATIOS     ?= 0.25 0.5 1
SWEEP_THRESHOLDS ?= off 0.7
pdiff-sft-cpu: setup $(SFT_DIR)/sft_rows.jsonl  ## hybrid AR + diffusion SFT on the rule rows
	grep -qs '"complete": true' $(PDIFF_DIR)/pdiff-sft/solm.json || $(BIN)/pdiff sft \
		--data $(SFT_DIR)/sft_rows.jsonl --out $(PDIFF_DIR)/pdiff-sft $(PDIFF_SFT_ARGS)

# the rule-row model, packed as pdiff-cpu into PDIFF_DIR/kept (the package's pdiff-cpu is
# `make own-pdiff-kept-cpu`'s)
rule-rows-pdiff-cpu: pdiff-sft-cpu  ## that model packed into PDIFF_DIR/kept
	rm -rf $(PDIFF_DIR)/kept/pdiff-cpu
	$(PACK) '$(PDIFF_DIR)/pdiff-sft', '$(PDIFF_DIR)/kept/pdiff-cpu')"
	printf '{\n  "do_sample": false,\n  "repetition_penalty": 1.2\n}\n' > $(PDIFF_DIR)/kept/pdiff-cpu/generation_config.json
	du -sh $(PDIFF_DIR)/kept/pdiff-cpu

# Planned Diffusion with exact promised lengths (no extra pads) and a cycle of seven pad
# tokens, on the own-answer rows the kept Baseline-SFT learnt from (OWN_ROWS; --max-len 1024
# keeps them all), against that Baseline-SFT on the selection prompts, steps ratio 0.5 as a
# cap, with and without committing every slot above a confidence threshold. Training resumes.
PDIFF_EXACT_DIR ?= runs/pdiff-exact
pdiff-exact-cpu: setup $(OWN_ROWS) $(ALPACA)  ## exact promised lengths, seven pads, on the own rows; selection prompts
	grep -qs '"complete": true' $(PDIFF_EXACT_DIR)/pdiff-sft/solm.json || $(BIN)/pdiff sft \
		--data $(OWN_ROWS) --out $(PDIFF_EXACT_DIR)/pdiff-sft $(PDIFF_SFT_ARGS) \
		--max-len 1024 --extra-pads 0 --pad-cycle 7
	$(BIN)/pasta eval run -o $(PDIFF_EXACT_DIR)/select --prompts $(ALPACA) --limit 30 \
		--method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:exact=$(PDIFF_EXACT_DIR)/pdiff-sft,steps_ratio=0.5 \
		--method pdiff:exact-conf=$(PDIFF_EXACT_DIR)/pdiff-sft,steps_ratio=0.5,confidence_threshold=0.9 \
		--method pdiff:exact-ls0.7=$(PDIFF_EXACT_DIR)/pdiff-sft,steps_ratio=0.5,length_scale=0.7 \
		--method pdiff:exact-ls0.5=$(PDIFF_EXACT_DIR)/pdiff-sft,steps_ratio=0.5,length_scale=0.5 \
		--max-new-tokens 384 --batch-size 16 --repetition-penalty 1.2 --no-judge -q
	$(BIN)/pasta eval report $(PDIFF_EXACT_DIR)/select -o $(PDIFF_EXACT_DIR)/select/report -q

# The kept Planned Diffusion models: the exact recipe on the own-answer rows (LoRA
# r8, exact lengths, seven pads), in the Pred-10X layout (pdiff-cpu) and the overlap one
# (pdiff-overlap-cpu, which llama.cpp decodes), each packed (int8 LoRA factors, 2.6 MB);
# ~11 min a training on 2 cores, resumable.
own-pdiff-kept-cpu: setup $(OWN_ROWS)  ## the kept Planned Diffusion models, from nothing
	grep -qs '"complete": true' $(PDIFF_EXACT_DIR)/pdiff-sft/solm.json || $(BIN)/pdiff sft \
		--data $(OWN_ROWS) --out $(PDIFF_EXACT_DIR)/pdiff-sft $(PDIFF_SFT_ARGS) \
		--max-len 1024 --extra-pads 0 --pad-cycle 7
	grep -qs '"complete": true' $(PDIFF_EXACT_DIR)/pdiff-sft-overlap/solm.json || $(BIN)/pdiff sft \
		--data $(OWN_ROWS) --out $(PDIFF_EXACT_DIR)/pdiff-sft-overlap $(PDIFF_SFT_ARGS) \
		--max-len 1024 --extra-pads 0 --pad-cycle 7 --positions overlap
	rm -rf $(ARTIFACTS)/pdiff-cpu $(ARTIFACTS)/pdiff-overlap-cpu
	$(PACK) '$(PDIFF_EXACT_DIR)/pdiff-sft', '$(ARTIFACTS)/pdiff-cpu')"
	$(PACK) '$(PDIFF_EXACT_DIR)/pdiff-sft-overlap', '$(ARTIFACTS)/pdiff-overlap-cpu')"
	for m in pdiff-cpu pdiff-overlap-cpu; do printf '{\n  "do_sample": false,\n  "repetition_penalty": 1.2\n}\n' \
		> $(ARTIFACTS)/$$m/generation_config.json; done
	du -sh $(ARTIFACTS)/pdiff-cpu $(ARTIFACTS)/pdiff-overlap-cpu

# Planned Diffusion recipes beside the kept exact one (same rows, same LoRA, seven pads):
# chunks denoised in blocks of PDIFF_BLOCK slots; chunks rewritten by the model itself
# (`pdiff distill`, the kept pasta-sft-cpu writing each planned chunk); both together. Each
# training 8-11 min on 2 cores, resumable; `make pdiff-recipes-select-cpu` decodes the 30
# selection prompts with every recipe against baseline-sft-cpu in one `pasta eval run`, all
# at the repetition penalty the kept models carry (1.2: a recipe's folder has no
# generation_config.json).
PDIFF_RECIPES_DIR ?= runs/pdiff-recipes
PDIFF_BLOCK       ?= 4
PDIFF_RECIPE_ARGS ?= $(PDIFF_SFT_ARGS) --max-len 1024 --extra-pads 0 --pad-cycle 7
PDIFF_SELF_ROWS   ?= $(PDIFF_RECIPES_DIR)/self/rows.jsonl
$(PDIFF_SELF_ROWS): | setup
	$(BIN)/pdiff distill --data $(OWN_ROWS) --writer pasta-sft-cpu -o $(PDIFF_RECIPES_DIR)/self -q

# each recipe's rows and settings beside PDIFF_RECIPE_ARGS
PDIFF_ROWS_blocks       = $(OWN_ROWS)
PDIFF_ARGS_blocks       = --block-size $(PDIFF_BLOCK)
PDIFF_ROWS_self-sft     = $(PDIFF_SELF_ROWS)
PDIFF_ARGS_self-sft     =
PDIFF_ROWS_self-blocks  = $(PDIFF_SELF_ROWS)
PDIFF_ARGS_self-blocks  = --block-size $(PDIFF_BLOCK)
PDIFF_RECIPES          ?= blocks self-sft self-blocks
pdiff_recipe = $(call trained,$(PDIFF_RECIPES_DIR)/$(1)$(2)) $(BIN)/pdiff sft \
	--data $(PDIFF_ROWS_$(1)) --out $(PDIFF_RECIPES_DIR)/$(1)$(2) $(PDIFF_RECIPE_ARGS) $(PDIFF_ARGS_$(1)) $(3)

pdiff-recipes-cpu: setup $(PDIFF_SELF_ROWS)  ## the block and self-distilled recipes (PDIFF_RECIPES)
	set -e; $(foreach R,$(PDIFF_RECIPES),$(call pdiff_recipe,$(R),,);)

pdiff-recipes-select-cpu: pdiff-recipes-cpu $(ALPACA)  ## every recipe on the selection prompts in one eval run
	$(BIN)/pasta eval run -o $(PDIFF_RECIPES_DIR)/select --prompts $(ALPACA) --limit 30 \
		--batch-size 16 --method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:kept=pdiff-cpu,steps_ratio=0.5 \
		$(foreach R,$(PDIFF_RECIPES),--method pdiff:$(R)=$(PDIFF_RECIPES_DIR)/$(R),steps_ratio=0.5) \
		--repetition-penalty 1.2 $(PDIFF_EVAL_ARGS)
	$(BIN)/pasta eval report $(PDIFF_RECIPES_DIR)/select -o $(PDIFF_RECIPES_DIR)/select/report

# The model chosen on the selection prompts (PDIFF_CHOSEN: the kept pdiff-cpu, which no
# recipe beat; a recipe's folder names one of them): the passes-for-quality curve on those
# prompts (steps ratio x confidence threshold, batched: forward passes per content token
# against content and well-formed), the one run on prompts 31-94 against Baseline-SFT, and the
# same recipe in the overlap layout (PDIFF_CHOSEN_OVERLAP), which llama.cpp decodes, timed one
# prompt at a time against Baseline-SFT on llama.cpp (both q8_0) for the realized content
# tokens per second.
PDIFF_CHOSEN           ?= pdiff-cpu
PDIFF_CHOSEN_OVERLAP   ?= pdiff-overlap-cpu
PDIFF_STEPS            ?= steps_ratio=0.5
PDIFF_CURVE_RATIOS     ?= 0.25 0.5 1
PDIFF_CURVE_THRESHOLDS ?= off 0.9 0.7
PDIFF_REALIZED_PROMPTS ?= 16
pdiff-curve-cpu: setup $(ALPACA)  ## the chosen model's steps ratio x threshold curve
	$(BIN)/pasta eval run -o $(PDIFF_RECIPES_DIR)/curve --prompts $(ALPACA) --limit 30 \
		--batch-size 16 --method sequential:baseline-sft=baseline-sft-cpu \
		$(foreach R,$(PDIFF_CURVE_RATIOS),$(foreach T,$(PDIFF_CURVE_THRESHOLDS),--method pdiff:r$(R)-t$(T)=$(PDIFF_CHOSEN),steps_ratio=$(R),confidence_threshold=$(T))) \
		--max-new-tokens 384 --no-judge --no-compile -q
	$(BIN)/pasta eval report $(PDIFF_RECIPES_DIR)/curve -o $(PDIFF_RECIPES_DIR)/curve/report

pdiff-final-cpu: setup $(ALPACA)  ## the chosen model on prompts 31-94 against Baseline-SFT
	$(BIN)/pasta eval run -o $(PDIFF_RECIPES_DIR)/final --prompts $(ALPACA) --skip 30 --limit 64 \
		--batch-size 16 --method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:chosen=$(PDIFF_CHOSEN),$(PDIFF_STEPS) \
		--max-new-tokens 384 --judge $(JUDGE) --no-compile -q
	$(BIN)/pasta eval report $(PDIFF_RECIPES_DIR)/final -o $(PDIFF_RECIPES_DIR)/final/report

pdiff-realized-cpu: setup $(ALPACA)  ## the chosen overlap model timed on llama.cpp at batch 1
	$(BIN)/pasta eval run -o $(PDIFF_RECIPES_DIR)/realized --prompts $(ALPACA) --skip 30 \
		--limit $(PDIFF_REALIZED_PROMPTS) --batch-size 1 --engine llama.cpp --gguf-type q8_0 \
		--method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:chosen-overlap=$(PDIFF_CHOSEN_OVERLAP),$(PDIFF_STEPS) \
		--max-new-tokens 384 --no-judge -q
	$(BIN)/pasta eval report $(PDIFF_RECIPES_DIR)/realized -o $(PDIFF_RECIPES_DIR)/realized/report

pdiff-decode-cpu: setup $(ALPACA)  ## PDIFF_MODEL decodes 30 AlpacaEval prompts
	$(BIN)/pdiff decode -m $(PDIFF_MODEL) -p $(ALPACA) --limit 30 --steps-ratio 0.5 \
		--max-new-tokens 384 -o $(PDIFF_DIR)/decode.jsonl -q

pdiff-eval-cpu: setup $(ALPACA)  ## PDIFF_MODEL against Baseline-SFT and Pasta-SFT, judged
	$(BIN)/pasta eval run -o $(PDIFF_DIR)/eval --prompts $(ALPACA) \
		--method sequential:baseline-sft=baseline-sft-cpu --method apar:pasta-sft=pasta-sft-cpu \
		--method pdiff:pdiff-0.5=$(PDIFF_MODEL),steps_ratio=0.5 $(PDIFF_EVAL_ARGS)
	$(BIN)/pasta eval report $(PDIFF_DIR)/eval -o $(PDIFF_DIR)/eval/report

pdiff-sweep-cpu: setup $(ALPACA)  ## the steps ratio x threshold sweep of PDIFF_MODEL
	$(BIN)/pasta eval run -o $(PDIFF_DIR)/sweep --prompts $(ALPACA) --batch-size 16 \
		--method sequential:baseline-sft=baseline-sft-cpu \
		$(foreach R,$(SWEEP_RATIOS),$(foreach T,$(SWEEP_THRESHOLDS),--method pdiff:r$(R)-t$(T)=$(PDIFF_MODEL),steps_ratio=$(R),confidence_threshold=$(T))) \
		$(PDIFF_EVAL_ARGS)
	$(BIN)/pasta eval report $(PDIFF_DIR)/sweep -o $(PDIFF_DIR)/sweep/report

# The two-copy recipes (BD3-LM's layout: every block of every chunk trained in each pass,
# `pdiff sft --layout two-copy`), on the own-answer rows with exact promised lengths and
# seven pads, each beside the others: the layout alone (whole chunks); blocks of
# PDIFF_TC_BLOCK slots with the masking band 0.3-0.8; the same for two epochs; the same
# with the kept Baseline-SFT's distribution as a soft target; a full finetune. Each training
# resumes; `make pdiff-two-copy-select-cpu` decodes the 30 selection prompts with every
# recipe against baseline-sft-cpu in one `pasta eval run` (steps ratio 0.5; the recipes
# with blocks also at min_fill 0.5).
PDIFF_TC_DIR    ?= runs/pdiff-two-copy
PDIFF_TC_BLOCK  ?= 8
PDIFF_TC_ARGS   ?= $(PDIFF_RECIPE_ARGS) --layout two-copy --max-len 1536
PDIFF_TC_BAND   ?= --mask-eps 0.3 --mask-max 0.8
PDIFF_TC_whole      = 
PDIFF_TC_blocks     = --block-size $(PDIFF_TC_BLOCK) $(PDIFF_TC_BAND)
PDIFF_TC_blocks-2ep = --block-size $(PDIFF_TC_BLOCK) $(PDIFF_TC_BAND) --epochs 2
PDIFF_TC_soft       = --block-size $(PDIFF_TC_BLOCK) $(PDIFF_TC_BAND) --soft-target baseline-sft-cpu
PDIFF_TC_full       = --block-size $(PDIFF_TC_BLOCK) $(PDIFF_TC_BAND) --lora-r 0 --lr 2e-4 \
	--control-token-lr-scale 30
PDIFF_TC_RECIPES ?= whole blocks soft blocks-2ep full
PDIFF_TC_LEVERS  ?= steps_ratio=0.5
pdiff_tc_recipe = $(call trained,$(PDIFF_TC_DIR)/$(1)) $(BIN)/pdiff sft --data $(OWN_ROWS) \
	--out $(PDIFF_TC_DIR)/$(1) $(PDIFF_TC_ARGS) $(PDIFF_TC_$(1))

.PHONY: pdiff-two-copy-recipes-cpu pdiff-two-copy-select-cpu
pdiff-two-copy-recipes-cpu: setup $(OWN_ROWS)  ## the two-copy recipes (PDIFF_TC_RECIPES), resumable
	set -e; $(foreach R,$(PDIFF_TC_RECIPES),$(call pdiff_tc_recipe,$(R));)

pdiff-two-copy-select-cpu: pdiff-two-copy-recipes-cpu $(ALPACA)  ## every two-copy recipe on the selection prompts
	$(BIN)/pasta eval run -o $(PDIFF_TC_DIR)/select --prompts $(ALPACA) --limit 30 \
		--batch-size 16 --method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:kept=pdiff-cpu,steps_ratio=0.5 \
		$(foreach R,$(PDIFF_TC_RECIPES),--method pdiff:$(R)=$(PDIFF_TC_DIR)/$(R),$(PDIFF_TC_LEVERS)) \
		$(foreach R,$(filter-out whole,$(PDIFF_TC_RECIPES)),--method pdiff:$(R)-fill=$(PDIFF_TC_DIR)/$(R),$(PDIFF_TC_LEVERS),min_fill=0.5) \
		--repetition-penalty 1.2 --max-new-tokens 384 --no-judge --no-compile -q
	$(BIN)/pasta eval report $(PDIFF_TC_DIR)/select -o $(PDIFF_TC_DIR)/select/report

# The decode levers on the two-copy recipes, prompts 1-30, each block of methods one run with
# the baseline in it (bench/results/pdiff_two_copy_cpu.md): min_fill on every recipe,
# pad_confidence, one token a step (steps_ratio 1.0), confidence order, length_scale. Then
# the chosen method (PDIFF_TC_CHOSEN with PDIFF_TC_CHOSEN_LEVERS) once on prompts 31-94
# against the kept Baseline-SFT, one prompt at a time on the fastest engine (`auto`), so
# the same run gives content, passes and realized tokens per second.
PDIFF_TC_SELECT = $(BIN)/pasta eval run --prompts $(ALPACA) --limit 30 --batch-size 16 \
	--method sequential:baseline-sft=baseline-sft-cpu --repetition-penalty 1.2 \
	--max-new-tokens 384 --no-judge --no-compile -q
PDIFF_TC_CHOSEN        ?= blocks
PDIFF_TC_CHOSEN_LEVERS ?= steps_ratio=1.0,min_fill=0.9
.PHONY: pdiff-two-copy-levers-cpu pdiff-two-copy-final-cpu
pdiff-two-copy-levers-cpu: pdiff-two-copy-recipes-cpu $(ALPACA)  ## the decode levers on the two-copy recipes (prompts 1-30)
	$(PDIFF_TC_SELECT) -o $(PDIFF_TC_DIR)/select-levers \
		--method pdiff:kept-fill=pdiff-cpu,steps_ratio=0.5,min_fill=0.5 \
		--method pdiff:whole-fill=$(PDIFF_TC_DIR)/whole,steps_ratio=0.5,min_fill=0.5 \
		--method pdiff:blocks-fill7=$(PDIFF_TC_DIR)/blocks,steps_ratio=0.5,min_fill=0.7 \
		--method pdiff:blocks-fill-conf=$(PDIFF_TC_DIR)/blocks,steps_ratio=0.5,min_fill=0.5,pad_confidence=0.9
	$(PDIFF_TC_SELECT) -o $(PDIFF_TC_DIR)/select-steps \
		--method pdiff:blocks-fill7-s1=$(PDIFF_TC_DIR)/blocks,steps_ratio=1.0,min_fill=0.7 \
		--method pdiff:blocks-fill7-s1-conf=$(PDIFF_TC_DIR)/blocks,steps_ratio=1.0,min_fill=0.7,order=confidence
	$(PDIFF_TC_SELECT) -o $(PDIFF_TC_DIR)/select-content \
		--method pdiff:blocks-s1-fill9=$(PDIFF_TC_DIR)/blocks,steps_ratio=1.0,min_fill=0.9 \
		--method pdiff:blocks-s1-fill7-len13=$(PDIFF_TC_DIR)/blocks,steps_ratio=1.0,min_fill=0.7,length_scale=1.3
	for R in select-levers select-steps select-content; do \
		$(BIN)/pasta eval report $(PDIFF_TC_DIR)/$$R -o $(PDIFF_TC_DIR)/$$R/report -q; done

pdiff-two-copy-final-cpu: pdiff-two-copy-recipes-cpu $(ALPACA)  ## the chosen two-copy method on prompts 31-94, batch 1, timed
	$(BIN)/pasta eval run -o $(PDIFF_TC_DIR)/final --prompts $(ALPACA) --skip 30 --limit 64 \
		--batch-size 1 --engine auto --method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:$(PDIFF_TC_CHOSEN)-chosen=$(PDIFF_TC_DIR)/$(PDIFF_TC_CHOSEN),$(PDIFF_TC_CHOSEN_LEVERS) \
		--repetition-penalty 1.2 --max-new-tokens 384 --no-judge -q
	$(BIN)/pasta eval report $(PDIFF_TC_DIR)/final -o $(PDIFF_TC_DIR)/final/report -q
