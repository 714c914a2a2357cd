# streameval — every target creates what it needs by itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# the compiled loops of the evaluation core (Rust, built by maturin through pip)
KERNELS := pipeline/kernels
# rustup installs cargo here and leaves adding it to PATH to a login shell
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: demo test lint unit bench soak clean

# A virtualenv with the project, its compiled kernels and its test extras; rebuilt when
# pyproject.toml or the kernels' sources change.
$(STAMP): pyproject.toml $(KERNELS)/pyproject.toml $(KERNELS)/Cargo.toml $(KERNELS)/Cargo.lock $(wildcard $(KERNELS)/src/*.rs)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "streameval needs Python >= 3.11, found " + sys.version.split()[0])'
	@command -v cargo > /dev/null || { echo "streameval's compiled kernels ($(KERNELS)) need Rust's cargo, not found on PATH nor in ~/.cargo/bin: install Rust with rustup (https://rustup.rs), then run make again"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet ./$(KERNELS)
	@touch $@

demo: $(STAMP)  ## Kafka, topics, a worker and five River models, live; Ctrl-C stops it all
	$(BIN)/streameval demo $(DEMO_ARGS)

test: $(STAMP)  ## lint, then the whole test suite with doctests
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	deploy/prometheus/install-tools
	$(BIN)/pytest --durations=25

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)  ## every benchmark: each with its peer where it has one, and the measurements of docs/performance.md
	$(BIN)/python benchmarks/core_vs_river.py
	$(BIN)/python benchmarks/held_auc.py
	$(BIN)/python benchmarks/decode.py
	$(BIN)/python benchmarks/pipeline_throughput.py
	$(BIN)/python benchmarks/store_choice.py
	$(BIN)/python benchmarks/pending_scale.py
	$(BIN)/python benchmarks/scrape.py
	$(BIN)/python benchmarks/many_models.py
	$(BIN)/python benchmarks/checkpoint_writes.py
	$(BIN)/python benchmarks/join_store.py
	$(BIN)/python benchmarks/pipeline_throughput.py --compare-features 3

soak: $(STAMP)  ## the long runs: 10^6 pending instances moving between workers; 30 min of traffic; the full fault campaign
	STREAMEVAL_TEST_MOVE_PENDING=1000000 $(BIN)/pytest tests/integration/test_state.py -k moves
	$(BIN)/python benchmarks/soak.py --minutes 30
	$(BIN)/python -m tests.reliability.campaign

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build *.egg-info $(KERNELS)/target
