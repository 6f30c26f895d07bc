"""A threads setting of 0 (`trainer.threads`, `skyrl serve --threads`) means every core, or
`$SKYRL_THREADS` when set: on a machine shared with other work (the test suite sets 1) one
variable keeps every process of every run, Ray workers included, off oversubscribed cores."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from agents.engines import OMP_WAIT, THREADS_ENV, torch_threads
from agents.models import resolve_model
from trainers.config import build_config
from trainers.placement import _build, worker_env


@pytest.mark.parametrize(
    ("setting", "env", "want"),
    [
        (3, "1", 3),  # a setting other than 0 wins
        (0, "2", 2),
        (0, None, os.cpu_count()),
        (0, "0", os.cpu_count()),
        (0, "many", os.cpu_count()),  # not a count: ignored
    ],
)
def test_zero_threads_means_skyrl_threads_else_every_core(monkeypatch, setting, env, want):
    if env is None:
        monkeypatch.delenv(THREADS_ENV, raising=False)
    else:
        monkeypatch.setenv(THREADS_ENV, env)
    assert torch_threads(setting) == want


def test_ray_workers_get_the_variable_on_a_joined_cluster_too(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "1")
    assert worker_env()[THREADS_ENV] == "1"  # what every worker sets first (placement.py)
    monkeypatch.delenv(THREADS_ENV)
    assert THREADS_ENV not in worker_env()


def test_a_worker_backend_uses_it(monkeypatch):
    """What a Ray worker runs to build the engine of a run whose trainer.threads is 0."""
    cfg = build_config([{"model": {"name": "tiny"}}], env_name="math")
    assert cfg.trainer.threads == 0  # the saved config keeps 0; the variable is read where it runs
    before = torch.get_num_threads()
    try:
        for count in ("1", "2"):
            monkeypatch.setenv(THREADS_ENV, count)
            _build("engine", str(resolve_model("tiny", quiet=True)), cfg)
            assert torch.get_num_threads() == int(count)
    finally:
        torch.set_num_threads(before)


# -- idle OpenMP threads sleep (OMP_WAIT_POLICY) ---------------------------------------------


def _cli_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != OMP_WAIT}
    return {**env, **extra}


@pytest.mark.parametrize(("given", "want"), [({}, "PASSIVE"), ({OMP_WAIT: "ACTIVE"}, "ACTIVE")])
def test_the_cli_lets_idle_openmp_threads_sleep_before_torch_loads(given, want):
    """torch's OpenMP reads OMP_WAIT_POLICY once, when torch is imported: `skyrl` sets it
    first thing (a user's own value wins), so idle threads sleep instead of spinning on a
    core the other process of the run (driver or worker) is waiting for."""
    code = "import os, sys, skyrl_cli.main; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_cli_env(given),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == [want, "False"]


def test_ray_workers_get_the_wait_policy_before_they_import_torch(monkeypatch):
    monkeypatch.delenv(OMP_WAIT, raising=False)
    assert worker_env()[OMP_WAIT] == "PASSIVE"
    monkeypatch.setenv(OMP_WAIT, "ACTIVE")  # a user's own choice travels as it is
    assert worker_env()[OMP_WAIT] == "ACTIVE"
