"""Warm workers (`SKYRL_REUSE_WORKERS`, trainers/warm.py): on a cluster a run joins, a run
that ended cleanly leaves its worker process, holding nothing of it, for the next run to
take; a failed, stopped or killed run's worker ends; an idle one ends after its time.

On the session's real Ray cluster, from driver processes of their own (as `skyrl train`).
Each test names a pool of its own (`SKYRL_REUSE_WORKERS=<label>`): the suite's `skyrl`
commands share the cluster's default pool at the same time."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

DRIVER = """
import json, os, sys
import ray
from agents.models import resolve_model
from trainers import placement, stopping
from trainers.client import AdamParams, Datum
from trainers.config import build_config
from trainers.placement import place, start_ray

address, end = sys.argv[1], sys.argv[2]
start_ray(address)
cfg = build_config([{"model": {"name": "tiny"}, "trainer": {"threads": 1},
                     "algorithm": {"name": "ppo", "kl_coef": 0.05},
                     "ray": {"address": address}}], env_name="math")
clients = place(cfg, resolve_model("tiny", quiet=True))
pid = ray.get(clients.policy.learner.actor.__ray_call__.remote(lambda self: os.getpid()))
ids = list(range(5, 25))
datum = Datum.from_sequence(ids, [0] * 8 + [1] * 12, 8, advantages=[1.0] * 20)
clients.policy.forward_backward([datum], "importance_sampling").result()
clients.policy.optim_step(AdamParams(learning_rate=1e-2)).result()
sampler = clients.policy.save_weights_and_get_sampling_client(1)
out = {"pid": pid,
       "engine_lp": sampler.compute_logprobs([ids], 1.0).result()[0][8:],
       "reference_lp": clients.reference.compute_logprobs([ids], 1.0).result()[0][8:]}
print(json.dumps(out), flush=True)
if end == "give":
    placement.give_back()
elif end == "fail":
    stopping.end_processes()
elif end == "kill":
    os.kill(os.getpid(), 9)
"""


def _drive(ray_address: str, end: str, label: str | None, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "SKYRL_REUSE_WORKERS"}
    if label is not None:
        environ["SKYRL_REUSE_WORKERS"] = label
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, ray_address, end],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=300,
        env={**environ, **env},
    )
    assert proc.returncode == (-9 if end == "kill" else 0), proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _gone(pid: int, within_s: float = 15.0) -> bool:
    deadline = time.time() + within_s
    while time.time() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def label() -> str:
    return f"t{secrets.token_hex(4)}"


def test_a_run_takes_the_worker_a_clean_run_gave_back_and_computes_the_same(ray_address, label):
    fresh = _drive(ray_address, "give", None)  # no reuse asked: today's fresh worker
    assert _gone(fresh["pid"])  # which ends with its run
    first = _drive(ray_address, "give", label)
    second = _drive(ray_address, "give", label)
    assert second["pid"] == first["pid"]  # the same process: no second start-up
    assert first["pid"] != fresh["pid"]
    # nothing of the first run is left in it: its update and weight push are gone, and
    # both runs compute what a fresh worker computes, to the last bit
    assert first["engine_lp"] == fresh["engine_lp"] == second["engine_lp"]
    assert first["reference_lp"] == fresh["reference_lp"] == second["reference_lp"]


def test_a_failed_or_killed_runs_worker_ends_instead_of_going_back(ray_address, label):
    warm = _drive(ray_address, "give", label)
    failed = _drive(ray_address, "fail", label)
    assert failed["pid"] == warm["pid"]  # it ran on the warm worker ...
    assert _gone(failed["pid"])  # ... which ended with it
    killed = _drive(ray_address, "kill", label)  # kill -9: nothing given back
    assert killed["pid"] != failed["pid"] and _alive(killed["pid"])
    after = _drive(ray_address, "give", label)
    assert after["pid"] != killed["pid"]
    assert _gone(killed["pid"])  # its holder's Ray job is dead: the pool ended it


def test_a_worker_idle_past_its_time_ends(ray_address, label):
    first = _drive(ray_address, "give", label, SKYRL_REUSE_IDLE_S="3")
    assert _alive(first["pid"])  # warm, waiting for a run ...
    time.sleep(3)
    assert _gone(first["pid"], within_s=20)  # ... until the pool's sweep ends it


def test_another_worker_setting_is_not_taken(ray_address, label):
    first = _drive(ray_address, "give", label, SKYRL_THREADS="1")
    other = _drive(ray_address, "give", label, SKYRL_THREADS="2")
    assert other["pid"] != first["pid"]
    again = _drive(ray_address, "give", label, SKYRL_THREADS="1")
    assert again["pid"] == first["pid"]
