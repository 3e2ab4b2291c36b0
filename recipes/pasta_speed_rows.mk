# PASTA on rows annotated for speed (`pasta annotate --shape speed`, mixed by annotation-level
# gain): recipes side by side, the chosen one on the final prompts, timed at batch 1, a
# Planned Diffusion recipe and BoNBoN rounds on the same rows. Included by the Makefile.
.PHONY: speed-rows-mix speed-rows-recipe speed-rows-final speed-rows-timed speed-rows-pdiff \
	speed-rows-bonbon

# Rows annotated for speed (`--shape speed`), a mix kept by annotation-level gain with the
# AlpacaEval prompts excluded, and recipes trained side by side: each recipe trains Pasta-SFT
# (and, for SPEED_BASE, Baseline-SFT: the same rows, tags removed) with its settings, then decodes the
# first SPEED_SELECT AlpacaEval prompts with both (greedy, batched) to choose a recipe; the
# chosen one is measured on the SPEED_FINAL prompts after those (`make speed-rows-final RECIPE=...`).
# Every recipe is measured against one Baseline-SFT (recipe SPEED_BASE's settings, the same rows
# with tags removed). Resumable like the reproductions: stamps in $(SPEED)/.done, every command
# resumes itself.
SPEED          ?= runs/speed-rows
SPEED_BASE     ?= a
SPEED_MIN_GAIN ?= 1.3
SPEED_SHAPE    ?=
SPEED_PLAIN    ?= 100
SPEED_SELECT   ?= 30
SPEED_FINAL    ?= 64
RECIPE       ?= a
SPEED_a        ?= --lora-r 16 --lr 1e-3 --batch-size 8 --epochs 1.5 --max-len 3200 --eval-rows 12 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
SPEED_b        ?= --lora-r 0 --lr 2e-4 --control-token-lr-scale 30 --batch-size 8 --epochs 2 --max-len 3200 --eval-rows 12 --save-every 20 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
SPEED_c        ?= --lora-r 32 --lr 1e-3 --batch-size 8 --epochs 2 --max-len 1536 --eval-rows 12 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
SPEED_EVAL_ARGS ?= --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q
.PRECIOUS: $(SPEED)/%/.done/pasta-sft $(SPEED)/%/.done/baseline-sft $(SPEED)/%/.done/select
speed-rows-mix: $(SPEED)/.done/mix  ## the speed-shaped rows, mixed by gain (AlpacaEval left out)
speed-rows-recipe: $(SPEED)/$(RECIPE)/.done/select  ## recipe RECIPE's Pasta-SFT on the selection prompts
speed-rows-final: $(SPEED)/$(RECIPE)/.done/final  ## the chosen model on the final prompts
$(SPEED)/.done/mix: | $(STAMP) $(DATA)/dolly.jsonl $(DATA)/slimorca.jsonl $(ALPACA)
	$(START)
	$(BIN)/pasta annotate -i $(DATA)/dolly.jsonl -o $(SPEED)/dolly_speed.jsonl --shape speed $(SPEED_SHAPE) -q
	$(BIN)/pasta annotate -i $(DATA)/slimorca.jsonl --limit $(ORCA_ROWS) -o $(SPEED)/orca_speed.jsonl --shape speed $(SPEED_SHAPE) -q
	$(BIN)/pasta stats $(SPEED)/dolly_speed.jsonl $(SPEED)/orca_speed.jsonl -q > $(SPEED)/annotation_stats.json
	$(BIN)/pasta mix $(SPEED)/dolly_speed.jsonl $(SPEED)/orca_speed.jsonl --min-gain $(SPEED_MIN_GAIN) \
		--plain $(SPEED_PLAIN) --exclude $(ALPACA) -o $(SPEED)/sft_rows.jsonl -q > $(SPEED)/mix.json
	$(DONE)
$(SPEED)/%/.done/pasta-sft: $(SPEED)/.done/mix
	$(START)
	$(call trained,$(SPEED)/$*/pasta-sft) $(BIN)/pasta sft --data $(SPEED)/sft_rows.jsonl \
		--out $(SPEED)/$*/pasta-sft $(SPEED_$*)
	$(DONE)
$(SPEED)/%/.done/baseline-sft: $(SPEED)/.done/mix
	$(START)
	$(call trained,$(SPEED)/$*/baseline-sft) $(BIN)/pasta sft --data $(SPEED)/sft_rows.jsonl \
		--out $(SPEED)/$*/baseline-sft --strip-annotations $(SPEED_$*)
	$(DONE)
$(SPEED)/%/.done/select: $(SPEED)/%/.done/pasta-sft $(SPEED)/$(SPEED_BASE)/.done/baseline-sft | $(ALPACA)
	$(START)
	$(BIN)/pasta eval run -o $(SPEED)/$*/select --prompts $(ALPACA) --limit $(SPEED_SELECT) \
		--method sequential:baseline-sft=$(SPEED)/$(SPEED_BASE)/baseline-sft \
		--method pasta:pasta-sft=$(SPEED)/$*/pasta-sft $(SPEED_EVAL_ARGS)
	$(BIN)/pasta eval report $(SPEED)/$*/select -o $(SPEED)/$*/select/report -q
	$(DONE)
# the realized figure: batch 1, warm, methods side by side per prompt (timed mode), on the
# first SPEED_TIMED prompts of the final set; run on a quiet machine
SPEED_TIMED    ?= 16
speed-rows-timed: $(SPEED)/$(RECIPE)/.done/timed  ## the chosen model timed at batch 1 against Baseline-SFT
.PRECIOUS: $(SPEED)/%/.done/timed
$(SPEED)/%/.done/timed: $(SPEED)/%/.done/select | $(ALPACA)
	$(START)
	$(BIN)/pasta eval run -o $(SPEED)/$*/timed --prompts $(ALPACA) --skip $(SPEED_SELECT) \
		--limit $(SPEED_TIMED) --method sequential:baseline-sft=$(SPEED)/$(SPEED_BASE)/baseline-sft \
		--method pasta:$(SPEED_PICK_NAME)=$(SPEED)/$*/$(SPEED_PICK) --max-new-tokens 512 --batch-size 1 \
		--repetition-penalty 1.2 --no-judge -q
	$(BIN)/pasta eval report $(SPEED)/$*/timed -o $(SPEED)/$*/timed/report -q
	$(DONE)

# Planned Diffusion on the same rows: few extra pads, the long rows kept, measured at steps
# ratio 0.5 without --defer-pads against recipe $(RECIPE)'s Baseline-SFT (the AR baseline)
SPEED_PDIFF      ?= pd1
SPEED_pd1        ?= --lora-r 16 --lr 1e-3 --batch-size 8 --epochs 1.5 --max-len 3200 --extra-pads 2 --eval-rows 12 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
SPEED_pd2        ?= --lora-r 0 --lr 2e-4 --control-token-lr-scale 30 --batch-size 8 --epochs 2 --max-len 3200 --extra-pads 2 --eval-rows 12 --save-every 20 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
SPEED_pd3        ?= --lora-r 0 --lr 2e-4 --control-token-lr-scale 30 --batch-size 8 --epochs 3 --max-len 3200 --extra-pads 2 --eval-rows 12 --save-every 20 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
SPEED_PLAIN_pd3  ?= 0
speed-rows-pdiff: $(SPEED)/$(SPEED_PDIFF)/.done/select  ## Planned Diffusion recipe SPEED_PDIFF on the same rows
.PRECIOUS: $(SPEED)/%/.done/pdiff-sft
# SPEED_PLAIN_<recipe> sets a recipe's own count of plain rows (pd3: none, since pd2 learned
# from the short plain rows to answer in one sentence whenever it plans nothing)
$(SPEED)/%/.done/pdiff-sft: $(SPEED)/.done/mix
	$(START)
	$(BIN)/pasta mix $(SPEED)/dolly_speed.jsonl $(SPEED)/orca_speed.jsonl --min-gain $(SPEED_MIN_GAIN) \
		--plain $(or $(SPEED_PLAIN_$*),$(SPEED_PLAIN)) --exclude $(ALPACA) -o $(SPEED)/$*/rows.jsonl -q > $(SPEED)/$*/mix.json
	$(call trained,$(SPEED)/$*/pdiff-sft) $(BIN)/pdiff sft --data $(SPEED)/$*/rows.jsonl \
		--out $(SPEED)/$*/pdiff-sft $(SPEED_$*)
	$(DONE)
$(SPEED)/$(SPEED_PDIFF)/.done/select: $(SPEED)/$(SPEED_PDIFF)/.done/pdiff-sft $(SPEED)/$(SPEED_BASE)/.done/baseline-sft | $(ALPACA)
	$(START)
	$(BIN)/pasta eval run -o $(SPEED)/$(SPEED_PDIFF)/select --prompts $(ALPACA) --limit $(SPEED_SELECT) \
		--method sequential:baseline-sft=$(SPEED)/$(SPEED_BASE)/baseline-sft \
		--method pdiff:pdiff-0.5=$(SPEED)/$(SPEED_PDIFF)/pdiff-sft,steps_ratio=0.5 $(SPEED_EVAL_ARGS)
	$(BIN)/pasta eval report $(SPEED)/$(SPEED_PDIFF)/select -o $(SPEED)/$(SPEED_PDIFF)/select/report -q
	$(DONE)
# BoNBoN rounds on a recipe's Pasta-SFT (`make speed-rows-bonbon RECIPE=b`): 40 held-out Dolly prompts
# (neither trained on nor AlpacaEval), N samples each scored by their own speedup (--speed own,
# no judge), a sample shorter than SPEED_MIN_LENGTH x the Baseline-SFT answer or malformed never
# chosen; then the last round's model on the selection prompts beside its parent.
SPEED_ROUNDS      ?= 1
SPEED_MIN_LENGTH  ?= 0.9
SPEED_PREFS_ARGS  ?= -n 4 --max-new-tokens 512 --repetition-penalty 1.2 --speed own \
	--min-length-ratio $(SPEED_MIN_LENGTH) --baseline-model $(SPEED)/$(SPEED_BASE)/baseline-sft -q
SPEED_BONBON_ARGS ?= --lora-r 16 --lr 2e-4 --epochs 2 --batch-size 4 --eval-rows 6 --eval-every 4 --save-every 10 -q
SPEED_BONBON = $(SPEED)/$(RECIPE)/prefs/lambda-0/round-$(SPEED_ROUNDS)/bonbon
speed-rows-bonbon: $(SPEED)/$(RECIPE)/.done/bonbon-select  ## BoNBoN rounds on recipe RECIPE's Pasta-SFT
.PRECIOUS: $(SPEED)/%/prefs/dolly_heldout.jsonl
$(SPEED)/%/prefs/dolly_heldout.jsonl: $(SPEED)/.done/mix | $(DATA)/dolly.jsonl $(ALPACA)
	$(BIN)/python bench/heldout_prompts.py --prompts $(DATA)/dolly.jsonl --trained $(SPEED)/sft_rows.jsonl \
		--n 40 --exclude $(ALPACA) --out $@
$(SPEED)/%/.done/bonbon-select: $(SPEED)/%/.done/select $(SPEED)/%/prefs/dolly_heldout.jsonl
	$(START)
	$(MAKE) pasta-rounds PREFS_DIR=$(SPEED)/$*/prefs START_MODEL=$(SPEED)/$*/pasta-sft SFT_DIR=$(SPEED) LAMBDA=0 \
		ROUNDS=$(SPEED_ROUNDS) PREFS_ARGS="$(SPEED_PREFS_ARGS)" BONBON_ARGS="$(SPEED_BONBON_ARGS)"
	$(BIN)/pasta eval run -o $(SPEED)/$*/bonbon-select --prompts $(ALPACA) --limit $(SPEED_SELECT) \
		--method sequential:baseline-sft=$(SPEED)/$(SPEED_BASE)/baseline-sft \
		--method pasta:pasta-sft=$(SPEED)/$*/pasta-sft \
		--method pasta:pasta-bonbon=$(SPEED)/$*/prefs/lambda-0/round-$(SPEED_ROUNDS)/bonbon $(SPEED_EVAL_ARGS)
	$(BIN)/pasta eval report $(SPEED)/$*/bonbon-select -o $(SPEED)/$*/bonbon-select/report -q
	$(DONE)
# the final measurement of the chosen model (SPEED_PICK, under the recipe's folder; the BoNBoN
# child: SPEED_PICK=prefs/lambda-0/round-1/bonbon SPEED_PICK_NAME=pasta-bonbon)
SPEED_PICK      ?= pasta-sft
SPEED_PICK_NAME ?= pasta-sft
$(SPEED)/%/.done/final: $(SPEED)/%/.done/select | $(ALPACA)
	$(START)
	$(BIN)/pasta eval run -o $(SPEED)/$*/final --prompts $(ALPACA) --skip $(SPEED_SELECT) \
		--limit $(SPEED_FINAL) --method sequential:baseline-sft=$(SPEED)/$(SPEED_BASE)/baseline-sft \
		--method pasta:$(SPEED_PICK_NAME)=$(SPEED)/$*/$(SPEED_PICK) $(SPEED_EVAL_ARGS)
	$(BIN)/pasta eval report $(SPEED)/$*/final -o $(SPEED)/$*/final/report -q
	$(DONE)
