"""`ray.share_process`: a sync run's learner, engine, reference and critic live in one Ray
worker process (one start-up, one runtime in memory), and every call still reaches its own
backend: the engine scores like the learner after a weight push through that process.
On the session's real Ray cluster, from a driver process of its own (as `skyrl train`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = """
import json, os, sys
import ray
from agents.models import resolve_model
from trainers.client import AdamParams, Datum
from trainers.config import build_config
from trainers.placement import place, start_ray

start_ray(sys.argv[1])
sections = {"model": {"name": "tiny"}, "trainer": {"threads": 1},
            "algorithm": {"name": "ppo", "kl_coef": 0.05},
            "ray": {"share_process": sys.argv[2] == "1"}}
if len(sys.argv) > 3:
    sections["trainer"]["schedule"] = sys.argv[3]
cfg = build_config([sections], env_name="math")
clients = place(cfg, resolve_model("tiny", quiet=True))
pid = lambda h: ray.get(h.actor.__ray_call__.remote(lambda self: os.getpid()))
out = {"pids": {
    "learner": pid(clients.policy.learner),
    "engine": pid(clients.policy.sampling_client().engine),
    "reference": pid(clients.reference.engine),
    "critic": pid(clients.critic.learner),
}}
ids = list(range(5, 25))
datum = Datum.from_sequence(ids, [0] * 8 + [1] * 12, 8, advantages=[1.0] * 20)
clients.policy.forward_backward([datum], "importance_sampling").result()
clients.policy.optim_step(AdamParams(learning_rate=1e-2)).result()
sampler = clients.policy.save_weights_and_get_sampling_client(1)
out["engine_lp"] = sampler.compute_logprobs([ids], cfg.rollout.temperature).result()[0][8:]
out["learner_lp"] = clients.policy.forward([datum]).result().loss_fn_outputs[0]["logprobs"]
out["reference_lp"] = clients.reference.compute_logprobs(
    [ids], cfg.rollout.temperature).result()[0][8:]
print(json.dumps(out))
"""


def _drive(ray_address: str, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, ray_address, *args],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_sync_runs_backends_share_one_worker_process(ray_address):
    out = _drive(ray_address, "1")
    assert len(set(out["pids"].values())) == 1, out["pids"]
    # the pushed weights reached the engine, not the reference beside it in that process
    assert out["engine_lp"] == pytest.approx(out["learner_lp"], abs=1e-4)
    assert out["reference_lp"] != pytest.approx(out["learner_lp"], abs=1e-4)


def test_share_process_false_and_async_give_one_process_each(ray_address):
    assert len(set(_drive(ray_address, "0")["pids"].values())) == 4
    # async decodes while the learner trains: never one process
    assert len(set(_drive(ray_address, "1", "async")["pids"].values())) == 4
