"""A threads setting of 0 (`trainer.threads`, `skyrl serve --threads`) means every core, or
`$SKYRL_THREADS` when set: on a machine shared with other work (the test suite sets 1) one
variable keeps every process of every run, Ray workers included, off oversubscribed cores."""

from __future__ import annotations

import os

import pytest
import torch

from agents.engines import THREADS_ENV, torch_threads
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
