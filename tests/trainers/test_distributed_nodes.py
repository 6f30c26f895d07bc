"""Two Ray nodes on one machine (loopback): a head with 2 CPUs and a second node with 1,
started with `ray start` as a user starts a cluster. With `ray.placement=split` the learner
group (2 FSDP workers) reserves a placement group on one node and the engine runs on the
other; weights cross nodes once per version and the engine then scores like the learner."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, _free_port, kill_cluster


def _ray_start(log: Path, temp_dir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            str(BIN / "ray"),
            "start",
            "--block",
            "--node-ip-address=127.0.0.1",
            "--disable-usage-stats",
            *args,
        ],
        stdout=open(log, "w"),  # noqa: SIM115 - held for the node's lifetime
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """`ray start --head` (2 CPUs) and `ray start --address` (1 CPU), token-authenticated."""
    tmp = tmp_path_factory.mktemp("two-nodes")
    port = _free_port()
    auth = pytest.MonkeyPatch()
    auth.setenv("RAY_AUTH_MODE", "token")
    auth.setenv("RAY_AUTH_TOKEN", secrets.token_urlsafe(32))
    temp_dir = Path("/tmp") / f"skyrl-2n-{os.getpid()}"
    head = _ray_start(
        tmp / "head.log",
        temp_dir,
        "--head",
        f"--port={port}",
        "--num-cpus=2",
        "--include-dashboard=false",
        f"--temp-dir={temp_dir}",
    )
    address = f"127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert head.poll() is None and time.time() < deadline, (tmp / "head.log").read_text()
            time.sleep(0.5)
    second = _ray_start(tmp / "node.log", temp_dir, f"--address={address}", "--num-cpus=1")
    yield address
    for proc in (second, head):
        os.killpg(proc.pid, signal.SIGTERM)
    for proc in (second, head):
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    kill_cluster(temp_dir)
    auth.undo()


DRIVER = """
import json, sys, time
import ray
from agents.models import resolve_model
from trainers.client import AdamParams, Datum
from trainers.config import build_config
from trainers.placement import place, start_ray

start_ray(sys.argv[1])
deadline = time.time() + 60
while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.time() < deadline:
    time.sleep(0.5)
cfg = build_config(
    [{"model": {"name": "tiny"}, "learner": {"strategy": "fsdp", "num_workers": 2},
      "ray": {"placement": "split"}, "trainer": {"threads": 1}}],
    env_name="math",
)
clients = place(cfg, resolve_model("tiny", quiet=True))
out = {
    "learners": clients.policy.learner.nodes(),
    "engine": ray.get(clients.policy.sampling_client().engine.actor.node.remote()),
    "nodes": [n["NodeID"] for n in ray.nodes() if n["Alive"]],
}
# an update, then the weights cross to the engine's node
ids = list(range(5, 25))
datum = Datum.from_sequence(ids, [0] * 8 + [1] * 12, 8, advantages=[1.0] * 20)
clients.policy.forward_backward([datum], "importance_sampling").result()
clients.policy.optim_step(AdamParams(learning_rate=1e-3)).result()
sampler = clients.policy.save_weights_and_get_sampling_client(1)
out["engine_lp"] = sampler.compute_logprobs([ids], cfg.rollout.temperature).result()[0][8:]
out["learner_lp"] = clients.policy.forward([datum]).result().loss_fn_outputs[0]["logprobs"]
print(json.dumps(out))
"""


def test_split_placement_puts_learners_and_engine_on_different_nodes(two_nodes):
    """The driver is its own process (as `skyrl train` is): Ray keeps per-process state."""
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, two_nodes],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(set(out["learners"])) == 1, out  # one node holds the learner group
    assert out["engine"] not in out["learners"]
    assert {out["engine"], *out["learners"]} == set(out["nodes"])
    assert len(out["nodes"]) == 2
    # the engine, on the other node, scores like the learner after the weights crossed
    assert out["engine_lp"] == pytest.approx(out["learner_lp"], abs=1e-4)
