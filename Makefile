# The README's commands. Each sets up its own virtual environment in .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch the course is tested with; override, e.g. `make test TORCH=torch`.
TORCH ?= torch==2.13.0
# Tests run side by side in pytest-xdist workers, one per core (at most 4), each test file or
# class whole in one worker (tests/conftest.py); `make test TEST_WORKERS=0` runs them in one process.
TEST_WORKERS ?= auto

.PHONY: install demo test release clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --upgrade pip
	$(BIN)/python -m pip install -qq "$(TORCH)" -e ".[instructor,cluster]"
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/python -m autograder demo

test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist loadscope --no-loadscope-reorder

release: install
	$(BIN)/python -m autograder release

clean:
	rm -rf $(VENV) grading .pytest_cache
