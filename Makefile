# One command each on a fresh clone: the venv is created and filled on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench chaos dev clean

# The folders installed as the one package `threadwarden` (pyproject.toml [tool.setuptools]).
PACKAGE_DIRS := api protocol workflows activities ledger reading config worker client cli console agent_frameworks
# Strict editable mode links files one by one: an edit shows at once, but a new, moved or removed
# file needs a reinstall (its 13-line notice that it did so is silenced: it is this mode's
# normal way, not a problem). The stamp depends on the list of those files, rewritten only on a change.
SOURCES := $(VENV)/.sources
$(shell mkdir -p $(VENV) && find $(PACKAGE_DIRS) -type f \( -name '*.py' -o -name '*.sql' \
	-o -name py.typed -o -name '*.html' -o -name '*.js' -o -name '*.css' \) | LC_ALL=C sort > $(SOURCES).new \
	&& (cmp -s $(SOURCES).new $(SOURCES) || mv $(SOURCES).new $(SOURCES)); rm -f $(SOURCES).new)

$(STAMP): pyproject.toml $(SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	PYTHONWARNINGS=ignore::UserWarning:setuptools.command.editable_wheel \
		$(BIN)/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=strict
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/threadwarden demo

# Your own agents: `make dev BINDINGS=support:bindings` (several: space-separated), as
# `threadwarden dev --bindings support:bindings` does (docs/agents.md).
BINDINGS ?=
dev: $(STAMP)
	$(BIN)/threadwarden dev $(addprefix --bindings ,$(BINDINGS))

# The suite on TEST_WORKERS pytest-xdist workers sharing one embedded stack (tests/conftest.py);
# tests that start a `dev` or `demo` stack share one worker (xdist_group "usual-ports"), the slow
# ones another ("slow"). Four: on a slow day six loaded the 2 cores past the product's timeouts
# (the 1,000 burst logged activity timeouts beside the whole suite, none alone).
TEST_WORKERS ?= 4
# More pytest arguments, e.g. `make test PYTEST_ARGS=--durations=20`.
PYTEST_ARGS ?=
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# Everything but the end-to-end tests (tests/e2e): the quick loop while editing.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --ignore=tests/e2e $(PYTEST_ARGS)

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
