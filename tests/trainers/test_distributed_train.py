"""`skyrl train` with a learner group (learner.strategy, learner.num_workers) on the toy task:
3 steps with FSDP and with DeepSpeed ZeRO-2 and ZeRO-3, and a kill -9 resumed with another worker count that matches
the uninterrupted run (checkpoints hold full tensors by name, trainers/learner_dist.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, skyrl

pytest.importorskip("deepspeed")

TOY = Path(__file__).parents[1] / "e2e" / "toy"
# DeepSpeed at both stages it offers: ZeRO-2 (optimizer state and gradients sharded) and
# ZeRO-3 (weights too); each run costs CI ~30 s of worker start-up
STRATEGIES = {
    "fsdp": ["learner.strategy=fsdp"],
    "zero2": ["learner.strategy=deepspeed", "learner.zero_stage=2"],
    "zero3": ["learner.strategy=deepspeed", "learner.zero_stage=3"],
}


def _args(ray_address: str, name: str, *sets: str) -> list[str]:
    out = ["train", "--ray-address", ray_address, "--run-name", name, "--max-steps", "3"]
    for s in ("rollout.batch_size=2", "rollout.group_size=4", "trainer.checkpoint_every=1",
              "learner.num_workers=2", *sets):  # fmt: skip # a table of values, laid out by hand
        out += ["--set", s]
    return out


def _metrics(run: Path) -> dict[int, dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return {m["step"]: m for m in map(json.loads, lines)}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    d = tmp_path_factory.mktemp("toy")
    for f in TOY.iterdir():
        if f.is_file():
            shutil.copy(f, d / f.name)
    return d


@pytest.fixture(scope="module")
def full_runs(project, ray_address):
    """One uninterrupted 3-step run per strategy, 2 workers each."""
    runs = {}
    for name, sets in STRATEGIES.items():
        skyrl(*_args(ray_address, name, *sets), cwd=project, timeout=400)
        (runs[name],) = (project / "runs").glob(f"{name}-*")
    return runs


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_three_steps_with_each_strategy(full_runs, strategy):
    run = full_runs[strategy]
    m = _metrics(run)
    assert sorted(m) == [1, 2, 3]
    assert all(m[s]["grad_norm"] > 0 for s in m)  # the group trained
    model = run / "checkpoints" / "step-000003" / "model"
    assert (model / "model.safetensors").is_file() and (model / "config.json").is_file()


def test_kill_9_then_resume_with_another_worker_count(project, full_runs, ray_address):
    """Killed after step 1's checkpoint with 2 FSDP workers, resumed with 1: steps 2 and 3
    match the uninterrupted 2-worker run."""
    proc = subprocess.Popen(
        [str(BIN / "skyrl"), *_args(ray_address, "killed", *STRATEGIES["fsdp"])],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while not list((project / "runs").glob("killed-*/checkpoints/step-000001/trainer_state.json")):
        assert proc.poll() is None and time.time() < deadline, (
            "run ended before step 1's checkpoint"
        )
        time.sleep(0.01)
    proc.kill()  # SIGKILL
    proc.wait()
    (killed,) = (project / "runs").glob("killed-*")
    assert not (killed / "checkpoints" / "step-000003").exists(), "killed too late to test resume"
    skyrl(
        "train", "--resume", str(killed), "--ray-address", ray_address,
        "--set", "learner.num_workers=1", cwd=project, timeout=400,
    )  # fmt: skip # the command line reads as typed
    a, b = _metrics(full_runs["fsdp"]), _metrics(killed)
    assert sorted(b) == [1, 2, 3]
    for step in (2, 3):
        for key in ("loss", "pg_loss", "reward/mean", "grad_norm", "entropy"):
            assert b[step][key] == pytest.approx(a[step][key], abs=1e-4), (step, key)
