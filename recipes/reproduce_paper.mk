# The reproductions at paper scale: make repro-{pasta,tip,pdiff}-paper (repro-paper: all
# three), on GPUs. Included by the Makefile.
.PHONY: repro-pasta-paper repro-tip-paper repro-pdiff-paper repro-paper

# The thesis' settings, from configs/paper/<system>.yaml (models, data, sweeps: read here)
# and configs/paper/<system>/<command>.yaml (each command's options). Training runs under
# accelerate with FSDP (configs/accelerate/fsdp.yaml); sampling and decoding run one process
# per GPU, each on every N-th prompt (--shard auto), and `solm merge` joins the shards by id.
# Same stamps as the CPU runs: rerun after any stop. `make -n repro-pasta-paper` prints the
# whole chain. README "Reproductions" gives each run's hardware and API budget.
yaml = $(strip $(shell sed -n 's/^$(2):[[:space:]]*\([^#]*\).*/\1/p' $(1)))
PAPER        ?= runs/paper
PAPER_CFG    := configs/paper
GPUS         ?=
launch_train  = $(BIN)/accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes $(or $(GPUS),$(1)) -m solm.cli.main
launch_sample = $(BIN)/accelerate launch --config_file configs/accelerate/sample.yaml --num_processes $(or $(GPUS),$(1)) -m solm.cli.main

.PRECIOUS: $(PAPER)/%
repro-paper: repro-pasta-paper repro-tip-paper repro-pdiff-paper  ## the three systems at paper scale (GPUs, the thesis' settings)

# PASTA: Gemini annotation of SlimOrca -> Pasta-SFT, Baseline-SFT, APAR-SFT (rules
# annotation) -> for each lambda, `rounds` rounds of prefs + BoNBoN -> AlpacaEval 805
PP       := $(PAPER)/pasta
PP_C     := $(PAPER_CFG)/pasta
PP_MODEL := $(call yaml,$(PP_C).yaml,base_model)
PP_ANN   := $(call yaml,$(PP_C).yaml,annotator)
PP_SET   := $(call yaml,$(PP_C).yaml,train_set)
PP_ROWS  := $(call yaml,$(PP_C).yaml,train_rows)
PP_PREFS := $(call yaml,$(PP_C).yaml,prefs_prompts)
PP_LAMBDAS := $(call yaml,$(PP_C).yaml,lambdas)
PP_ROUNDS  := $(call yaml,$(PP_C).yaml,rounds)
PP_EVAL  := $(call yaml,$(PP_C).yaml,eval_set)
PP_JUDGE := $(call yaml,$(PP_C).yaml,judge)
PP_GPUS  := $(call yaml,$(PP_C).yaml,gpus)
PP_SFT    = $(call launch_train,$(PP_GPUS)) pasta sft --config $(PP_C)/sft.yaml --model $(PP_MODEL)
# the model a round starts from: Pasta-SFT for round 1, the previous round's BoNBoN after
pp_parent = $(if $(filter 1,$(2)),$(PP)/pasta-sft,$(PP)/lambda-$(1)/round-$(shell echo $$(($(2) - 1)))/bonbon)
pp_parent_done = $(if $(filter 1,$(2)),$(PP)/.done/sft,$(PP)/lambda-$(1)/round-$(shell echo $$(($(2) - 1)))/.done/bonbon)
PP_RUNS  := $(foreach L,$(PP_LAMBDAS),$(foreach R,$(shell seq 1 $(PP_ROUNDS)),$(PP)/lambda-$(L)/round-$(R)))
PP_METHODS = --method sequential:baseline-sft=$(PP)/baseline-sft --method pasta:pasta-sft=$(PP)/pasta-sft \
	--method apar:apar-sft=$(PP)/apar-sft --method sot:sot=$(PP)/baseline-sft \
	$(foreach L,$(PP_LAMBDAS),$(foreach R,$(shell seq 1 $(PP_ROUNDS)),--method pasta:lambda-$(L)-r$(R)=$(PP)/lambda-$(L)/round-$(R)/bonbon))
PP_EVAL_ARGS = -o $(PP)/eval --config $(PP_C)/eval.yaml --prompts $(DATA)/$(PP_EVAL).jsonl $(PP_METHODS)

repro-pasta-paper: $(PP)/.done/report  ## PASTA at paper scale: Gemini annotation ... AlpacaEval 805
$(PP)/.done/data: | $(STAMP)
	$(START)
	$(BIN)/solm data get $(PP_SET) --limit $(shell echo $$(($(PP_ROWS) + 5 * $(PP_PREFS)))) --data-dir $(DATA)
	$(BIN)/solm data get $(PP_EVAL) --data-dir $(DATA)
	$(DONE)
$(PP)/.done/annotate: $(PP)/.done/data
	$(START)
	$(BIN)/pasta annotate --config $(PP_C)/annotate.yaml -i $(DATA)/$(PP_SET).jsonl --limit $(PP_ROWS) \
		--annotator $(PP_ANN) -o $(PP)/annotated.jsonl
	$(BIN)/pasta annotate -i $(DATA)/$(PP_SET).jsonl --limit $(PP_ROWS) --annotator rules -o $(PP)/apar_rules.jsonl
	$(DONE)
$(PP)/.done/sft: $(PP)/.done/annotate
	$(START)
	$(call trained,$(PP)/pasta-sft) $(PP_SFT) --data $(PP)/annotated.jsonl --out $(PP)/pasta-sft
	$(DONE)
$(PP)/.done/baseline-sft: $(PP)/.done/annotate
	$(START)
	$(call trained,$(PP)/baseline-sft) $(PP_SFT) --data $(PP)/annotated.jsonl --strip-annotations --out $(PP)/baseline-sft
	$(DONE)
$(PP)/.done/apar-sft: $(PP)/.done/annotate
	$(START)
	$(call trained,$(PP)/apar-sft) $(PP_SFT) --data $(PP)/apar_rules.jsonl --out $(PP)/apar-sft
	$(DONE)
$(PP)/.done/prefs-prompts: $(PP)/.done/annotate
	$(START)
	$(BIN)/python bench/heldout_prompts.py --prompts $(DATA)/$(PP_SET).jsonl --trained $(PP)/annotated.jsonl \
		--n $(PP_PREFS) --max-chars 4000 --out $(PP)/prefs_prompts.jsonl
	$(DONE)
define pp_round
$(PP)/lambda-$(1)/round-$(2)/.done/prefs: $(call pp_parent_done,$(1),$(2)) $(PP)/.done/baseline-sft $(PP)/.done/prefs-prompts
	$$(START)
	$$(call launch_sample,$(PP_GPUS)) pasta prefs --shard auto --config $(PP_C)/prefs.yaml -p $(PP)/prefs_prompts.jsonl \
		-m $(call pp_parent,$(1),$(2)) --baseline-model $(PP)/baseline-sft --quality-weight $(1) \
		$(if $(filter 0,$(1)),,--judge $(PP_JUDGE)) --seed $(2) -o $(PP)/lambda-$(1)/round-$(2)/prefs
	$(BIN)/solm merge $(PP)/lambda-$(1)/round-$(2)/prefs
	$$(DONE)
$(PP)/lambda-$(1)/round-$(2)/.done/bonbon: $(PP)/lambda-$(1)/round-$(2)/.done/prefs
	$$(START)
	$$(call trained,$(PP)/lambda-$(1)/round-$(2)/bonbon) $$(call launch_train,$(PP_GPUS)) pasta bonbon --config $(PP_C)/bonbon.yaml \
		--data $(PP)/lambda-$(1)/round-$(2)/prefs/pairs.jsonl --model $(call pp_parent,$(1),$(2)) \
		--out $(PP)/lambda-$(1)/round-$(2)/bonbon
	$$(DONE)
endef
$(foreach L,$(PP_LAMBDAS),$(foreach R,$(shell seq 1 $(PP_ROUNDS)),$(eval $(call pp_round,$(L),$(R)))))
$(PP)/.done/eval-decode: $(PP)/.done/sft $(PP)/.done/baseline-sft $(PP)/.done/apar-sft $(addsuffix /.done/bonbon,$(PP_RUNS))
	$(START)
	$(call launch_sample,$(PP_GPUS)) pasta eval run --shard auto --no-judge $(PP_EVAL_ARGS)
	$(BIN)/solm merge $(PP)/eval
	$(DONE)
$(PP)/.done/report: $(PP)/.done/eval-decode
	$(START)
	$(BIN)/pasta eval run $(PP_EVAL_ARGS) --judge $(PP_JUDGE)
	$(BIN)/pasta eval report $(PP)/eval -o $(PP)/eval/report
	$(DONE)

# TIP: register annotation of DeepMath -> TIP-SFT and Dense-SFT -> GRPO -> AIME 2024/2025
PT       := $(PAPER)/tip
PT_C     := $(PAPER_CFG)/tip
PT_MODEL := $(call yaml,$(PT_C).yaml,base_model)
PT_ANN   := $(call yaml,$(PT_C).yaml,annotator)
PT_SET   := $(call yaml,$(PT_C).yaml,train_set)
PT_ROWS  := $(call yaml,$(PT_C).yaml,train_rows)
PT_GRPO  := $(call yaml,$(PT_C).yaml,grpo_rows)
PT_EVAL  := $(call yaml,$(PT_C).yaml,eval_sets)
PT_GPUS  := $(call yaml,$(PT_C).yaml,gpus)
PT_SFT    = $(call launch_train,$(PT_GPUS)) tip sft --config $(PT_C)/sft.yaml --model $(PT_MODEL) --data $(PT)/traces.jsonl

repro-tip-paper: $(PT)/.done/report  ## TIP at paper scale: DeepMath ... AIME 2024/2025
$(PT)/.done/data: | $(STAMP)
	$(START)
	$(BIN)/solm data get $(PT_SET) $(PT_EVAL) --data-dir $(DATA)
	$(DONE)
$(PT)/.done/annotate: $(PT)/.done/data
	$(START)
	$(BIN)/tip annotate --config $(PT_C)/annotate.yaml -i $(DATA)/$(PT_SET).jsonl --limit $(PT_ROWS) \
		--annotator $(PT_ANN) -o $(PT)/traces.jsonl
	$(DONE)
$(PT)/.done/tip-sft: $(PT)/.done/annotate
	$(START)
	$(call trained,$(PT)/tip-sft) $(PT_SFT) --out $(PT)/tip-sft
	$(DONE)
$(PT)/.done/dense-sft: $(PT)/.done/annotate
	$(START)
	$(call trained,$(PT)/dense-sft) $(PT_SFT) --strip-registers --out $(PT)/dense-sft
	$(DONE)
$(PT)/.done/grpo: $(PT)/.done/tip-sft
	$(START)
	$(call trained,$(PT)/tip-grpo) $(call launch_train,$(PT_GPUS)) tip grpo --config $(PT_C)/grpo.yaml \
		--data $(DATA)/$(PT_SET).jsonl --limit $(PT_GRPO) --model $(PT)/tip-sft --out $(PT)/tip-grpo
	$(DONE)
$(PT)/.done/eval-decode: $(PT)/.done/grpo $(PT)/.done/dense-sft
	$(START)
	$(call launch_sample,$(PT_GPUS)) tip eval run --shard auto --config $(PT_C)/eval.yaml -o $(PT)/eval \
		$(foreach S,$(PT_EVAL),--data $(DATA)/$(S).jsonl) --model $(PT)/tip-grpo --dense-model $(PT)/dense-sft
	$(BIN)/solm merge $(PT)/eval
	$(DONE)
$(PT)/.done/report: $(PT)/.done/eval-decode
	$(START)
	$(BIN)/tip eval report $(PT)/eval
	$(DONE)

# Planned Diffusion: PASTA's annotated SlimOrca -> hybrid SFT and AR-SFT -> AlpacaEval 805
PD       := $(PAPER)/pdiff
PD_C     := $(PAPER_CFG)/pdiff
PD_MODEL := $(call yaml,$(PD_C).yaml,base_model)
PD_EVAL  := $(call yaml,$(PD_C).yaml,eval_set)
PD_JUDGE := $(call yaml,$(PD_C).yaml,judge)
PD_RATIO := $(call yaml,$(PD_C).yaml,steps_ratio)
PD_GPUS  := $(call yaml,$(PD_C).yaml,gpus)
PD_EVAL_ARGS = -o $(PD)/eval --config $(PD_C)/eval.yaml --prompts $(DATA)/$(PD_EVAL).jsonl \
	--method sequential:ar-sft=$(PD)/ar-sft --method pdiff:pdiff=$(PD)/pdiff-sft,steps_ratio=$(PD_RATIO)

repro-pdiff-paper: $(PD)/.done/report  ## Planned Diffusion at paper scale ... AlpacaEval 805
$(PD)/.done/sft: $(PP)/.done/annotate
	$(START)
	$(call trained,$(PD)/pdiff-sft) $(call launch_train,$(PD_GPUS)) pdiff sft --config $(PD_C)/sft.yaml \
		--model $(PD_MODEL) --data $(PP)/annotated.jsonl --out $(PD)/pdiff-sft
	$(DONE)
$(PD)/.done/ar-sft: $(PP)/.done/annotate
	$(START)
	$(call trained,$(PD)/ar-sft) $(call launch_train,$(PD_GPUS)) pasta sft --config $(PP_C)/sft.yaml \
		--model $(PD_MODEL) --data $(PP)/annotated.jsonl --strip-annotations --out $(PD)/ar-sft
	$(DONE)
$(PD)/.done/eval-decode: $(PD)/.done/sft $(PD)/.done/ar-sft
	$(START)
	$(call launch_sample,$(PD_GPUS)) pasta eval run --shard auto --no-judge $(PD_EVAL_ARGS)
	$(BIN)/solm merge $(PD)/eval
	$(DONE)
$(PD)/.done/report: $(PD)/.done/eval-decode
	$(START)
	$(BIN)/pasta eval run $(PD_EVAL_ARGS) --judge $(PD_JUDGE)
	$(BIN)/pasta eval report $(PD)/eval -o $(PD)/eval/report
	$(DONE)
