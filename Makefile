# One command each on a fresh clone: the venv is created and filled on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench chaos dev clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/threadwarden demo

dev: $(STAMP)
	$(BIN)/threadwarden dev

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m bench

# Not part of `make test` (a reduced run is: tests/e2e/test_chaos_run.py). Flags: CHAOS_ARGS.
chaos: $(STAMP)
	$(BIN)/python -m chaos $(CHAOS_ARGS)

clean:
	rm -rf .threadwarden .pytest_cache .mypy_cache .ruff_cache
