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

# CI runs the quick mode; `make test-full` runs every slow suite and the long fuzz profile.
QUICK ?= 1
FORGE_PROFILE ?= ci
PYTEST_ARGS ?=

.PHONY: help setup demo test test-full lint typecheck contracts-test pytest bench snapshot clean

help:
	@echo "make demo       run the whole network on this machine (anvil, ledger, trainers, claims, a vote)"
	@echo "make test       everything CI runs: ruff, mypy, forge fmt/test, pytest (quick mode)"
	@echo "make test-full  the same with slow suites and full fuzz/invariant profiles"
	@echo "make bench      run the benchmarks (python -m bench.NAME)"

setup: node_modules/.installed $(VENV)/.installed out/.built .coloco/postgres.checked

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# torch==2.13.0 resolves to the local CPU wheel (pip's find-links); never let a resolver pull CUDA.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

out/.built: node_modules/.installed foundry.toml $(SOL_SOURCES)
	$(FORGE) build --quiet
	@mkdir -p out && touch $@

# PostgreSQL 15 server binaries are part of this machine image; install them if a machine lacks them.
.coloco/postgres.checked:
	@if [ -z "$(PG_INITDB)" ]; then \
		echo "PostgreSQL server not found: installing it from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	fi
	@mkdir -p .coloco && touch $@

demo: setup
	$(VENV)/bin/coloco demo --report reports/demo.json

lint: setup
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --no-cache --check .
	$(FORGE) fmt --check

typecheck: setup
	$(VENV)/bin/mypy

contracts-test: setup
	FOUNDRY_PROFILE=$(FORGE_PROFILE) $(FORGE) test

pytest: setup
	COLOCO_QUICK=$(QUICK) TRITON_INTERPRET=1 $(VENV)/bin/pytest $(PYTEST_ARGS)

test: lint typecheck contracts-test pytest

test-full:
	$(MAKE) test QUICK=0 FORGE_PROFILE=full

bench: setup
	$(PY) -m bench.verify
	$(PY) -m bench.codec
	$(PY) -m bench.diloco --quick
	$(PY) -m bench.ledger --quick

snapshot: setup
	FOUNDRY_PROFILE=$(FORGE_PROFILE) $(FORGE) snapshot

clean:
	rm -rf out cache .coloco .pytest_cache .mypy_cache .ruff_cache
