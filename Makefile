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
# pip compiles every installed module to bytecode on one core (73 of setup's 121 s here);
# the packages install without it and are compiled after, on every core. Not skipped:
# where PYTHONDONTWRITEBYTECODE is set (this machine), nothing would cache it, and every
# process would compile torch and transformers again (8.8 s -> 19.6 s to import them).
# Compile errors are pip's too (Python 2 files some packages ship): ignored, as pip does.
$(STAMP): pyproject.toml Makefile
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --no-compile torch==2.13.0
	$(BIN)/pip install -q --no-compile -e '.[dev]'
	# SWE-bench's official specification and log parsers (tasks/swe/official.py): its data
	# and pure functions only, so none of its requirements (docker, datasets, modal)
	$(BIN)/pip install -q --no-compile --no-deps swebench==4.1.0
	$(BIN)/python -m compileall -q -q -j 0 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || true
	touch $(STAMP)

train: setup
	$(BIN)/skyrl train --env sql

lint: setup
	$(BIN)/ruff check $(PKGS) tests benchmarks examples
	$(BIN)/ruff format --check $(PKGS) tests benchmarks examples

# mypy's cache lives beside skyrl's other caches, not in the checkout, so a fresh clone does
# not analyse torch and transformers again: about 36 CPU-s with a venv of its own (mypy
# re-hashes each installed module) and 4 with the same venv, against about 73 cold. mypy
# validates every entry against its source, so a cache shared by several clones or venvs
# stays correct (docs/benchmarks.md, test suite time).
MYPY_CACHE ?= $(or $(SKYRL_CACHE_DIR),$(HOME)/.cache/skyrl)/mypy

typecheck: setup
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)
	$(BIN)/mypy --cache-dir $(MYPY_CACHE) examples

# Two workers, a test file each at a time (module fixtures stay shared): most tests wait on
# subprocesses, sandboxes and Ray, so two files at once use the 2 cores better than one.
# Files go out in collection order, the longest first (LONGEST_FIRST in tests/conftest.py).
# The slowest tests are listed at the end of the log (CI time: docs/benchmarks.md).
pytest: setup
	$(BIN)/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=30

# Lint and the type check (about a minute of one core, cold) run beside the tests, not
# before them: the suite's wall time is the whole command's.
test: setup
	$(MAKE) --no-print-directory -j3 lint typecheck pytest

bench: setup
	$(BIN)/python benchmarks/grpo_step.py --model tiny

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
