# The README's commands. Each sets up its own virtual environment in .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch the course is tested with; override, e.g. `make test TORCH=torch`.
TORCH ?= torch==2.13.0
# Tests run side by side in pytest-xdist workers, one per core (at most 4), each test file or
# class whole in one worker (tests/conftest.py); `make test TEST_WORKERS=0` runs them in one process.
TEST_WORKERS ?= auto
# More arguments for pytest, e.g. `make test PYTEST_ARGS="tests/test_datasets.py -x"`.
PYTEST_ARGS ?=
# `make test-fresh`: `make test` RUNS times, each in a new clone under DIR (default: a new
# folder under the temp dir), printing each run's failures and wall time (tests/fresh_runs.py).
RUNS ?= 3
DIR ?=

.PHONY: install demo test test-fresh release clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --upgrade pip
	$(BIN)/python -m pip install -qq "$(TORCH)" -e ".[instructor,cluster]"
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/python -m autograder demo

test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist loadscope --no-loadscope-reorder $(PYTEST_ARGS)

test-fresh:
	$(PYTHON) tests/fresh_runs.py --runs $(RUNS) $(if $(DIR),--dir "$(DIR)") -- $(PYTEST_ARGS)

release: install
	$(BIN)/python -m autograder release

clean:
	rm -rf $(VENV) grading .pytest_cache
