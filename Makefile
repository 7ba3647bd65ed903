# coloco: the two commands a newcomer needs are `make demo` and `make test`.
# Each installs whatever is missing first (npm ci, the venv, forge build) and is idempotent:
# when nothing changed, set-up is a handful of stamp checks.

SHELL := /bin/bash
.DEFAULT_GOAL := help

ARCH := $(shell uname -m | sed -e 's/x86_64/amd64/' -e 's/aarch64/arm64/')
FOUNDRY := node_modules/@foundry-rs
FORGE := $(FOUNDRY)/forge-linux-$(ARCH)/bin/forge
VENV := .venv
PY := $(VENV)/bin/python
SOL_SOURCES := $(shell find contracts -name '*.sol' 2>/dev/null)
PG_INITDB := $(firstword $(wildcard /usr/lib/postgresql/*/bin/initdb))
CHROMIUM := /usr/bin/chromium
# The CPU build of torch (torch==2.13.0+cpu in the lock file) comes from these wheels, else
# from PyTorch's CPU index; never from a resolver's choice of a CUDA build.
TORCH_WHEELS ?= /opt/wheels
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PIP_SOURCES := $(if $(wildcard $(TORCH_WHEELS)),--find-links $(TORCH_WHEELS),--extra-index-url $(TORCH_INDEX))

# CI runs the quick mode; `make test-full` runs every slow suite and the long fuzz profile.
# The tests run on every core and one more worker (pytest-xdist; JOBS=0 runs them in this
# process): many tests wait on timeouts, heartbeats and other processes, and an extra worker fills
# those waits (measured on 2 cores: 3 workers beat 2).
QUICK ?= 1
FORGE_PROFILE ?= ci
JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST_ARGS ?=

.PHONY: help setup demo-setup demo test test-full lint typecheck contracts-test pytest js-test bench snapshot clean lock

help:
	@echo "make demo       run the whole network on this machine (anvil, ledger, trainers, claims, a vote)"
	@echo "make test       everything CI runs: ruff, lint-imports, mypy, forge fmt/test, pytest (quick mode)"
	@echo "make test-full  the same with slow suites and full fuzz/invariant profiles"
	@echo "make bench      run the benchmarks (python -m bench.NAME)"

# The parts install side by side (-j): forge compiles the contracts while pip fills the venv.
SETUP_PARTS := node_modules/.installed $(VENV)/.installed out/.built
setup:
	@$(MAKE) --no-print-directory -j3 $(SETUP_PARTS) .coloco/postgres.checked .coloco/chromium.checked

# `make demo` needs neither PostgreSQL nor a browser.
demo-setup:
	@$(MAKE) --no-print-directory -j3 $(SETUP_PARTS)

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# Every Python dependency, pinned with hashes, from requirements.lock.txt (`make lock` rewrites it
# from pyproject.toml); then the project itself without resolving anything again.
$(VENV)/.installed: pyproject.toml requirements.lock.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --require-hashes $(PIP_SOURCES) -r requirements.lock.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

lock: $(VENV)/.installed
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --generate-hashes --python-version 3.11 \
		$(if $(wildcard $(TORCH_WHEELS)),--find-links $(TORCH_WHEELS)) --index-url https://pypi.org/simple \
		-o requirements.lock.txt

# forge's artifacts (built while the venv installs), then the deployed contracts' ABIs copied
# into protocol/abi (package data)
out/.forge-built: node_modules/.installed foundry.toml $(SOL_SOURCES)
	$(FORGE) build --quiet
	@mkdir -p out && touch $@

out/.built: out/.forge-built $(VENV)/.installed
	$(PY) -c "from protocol.deployment import export_abis; export_abis()"
	@touch $@

# PostgreSQL 15 server binaries are part of this machine image; install them if a machine lacks them.
.coloco/postgres.checked:
	@if [ -z "$(PG_INITDB)" ]; then \
		echo "PostgreSQL server not found: installing it from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	fi
	@mkdir -p .coloco && touch $@

# The dashboard's browser test drives Debian's chromium; Playwright never downloads a browser.
# (after PostgreSQL's check: two apt-get at once would fight over dpkg's lock)
.coloco/chromium.checked: | .coloco/postgres.checked
	@if [ ! -x $(CHROMIUM) ]; then \
		echo "chromium not found: installing it from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	fi
	@mkdir -p .coloco && touch $@

demo: demo-setup
	$(VENV)/bin/coloco demo --report reports/demo.json

lint: setup
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --no-cache --check .
	$(FORGE) fmt --check
	$(VENV)/bin/lint-imports --no-cache

typecheck: setup
	$(VENV)/bin/mypy

contracts-test: setup
	FOUNDRY_PROFILE=$(FORGE_PROFILE) $(FORGE) test

# The workers share the cores: an idle OpenMP thread sleeps instead of spinning for the CPU the
# others need, and the hundreds of Python processes the tests start compile the project's
# modules once (into .coloco/pycache, out of the tree), not each.
PYTEST_ENV := COLOCO_QUICK=$(QUICK) TRITON_INTERPRET=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 \
	OMP_WAIT_POLICY=PASSIVE PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/.coloco/pycache

pytest: setup
	$(PYTEST_ENV) $(VENV)/bin/pytest -n $(JOBS) $(PYTEST_ARGS)

# JavaScript wallets (eth-sig-util, ethers) against the golden vectors: node's own test runner
js-test: node_modules/.installed
	node --test tests/js/

test: lint typecheck contracts-test js-test pytest

test-full:
	$(MAKE) test QUICK=0 FORGE_PROFILE=full
	$(PY) tools/mutate.py

bench: setup
	$(PY) -m bench.verify
	$(PY) -m bench.codec
	$(PY) -m bench.diloco --quick
	$(PY) -m bench.ledger --quick
	$(PY) -m bench.cli

snapshot: setup
	FOUNDRY_PROFILE=$(FORGE_PROFILE) $(FORGE) snapshot

clean:
	rm -rf out cache .coloco .pytest_cache .mypy_cache .ruff_cache
