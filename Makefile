# Two commands on a fresh clone (see README):
#   make train   set up .venv, then `skyrl train --env sql` on the embedded defaults
#   make test    set up .venv, then lint, type-check and run the test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PKGS := skyrl_cli trainers agents environments tasks tui server

.PHONY: setup train test lint typecheck pytest bench clean

setup: $(STAMP)

# torch first, pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

train: setup
	$(BIN)/skyrl train --env sql

lint: setup
	$(BIN)/ruff check $(PKGS) tests benchmarks examples
	$(BIN)/ruff format --check $(PKGS) tests benchmarks examples

typecheck: setup
	$(BIN)/mypy
	$(BIN)/mypy examples

pytest: setup
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: setup
	$(BIN)/python benchmarks/grpo_step.py --model tiny

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
