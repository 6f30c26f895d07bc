"""The RL loop learns: a random `tiny` model, trained by the real CLI, raises its reward.

The task (tests/e2e/toy/digits_env.py, a plugin environment) rewards the fraction of digits
in the reply. Measured here with the project's lr 0.003 (30 steps, constant lr): mean
reward 0.021 over steps 1-5, 0.309 over 21-25, 0.558 over 26-30. The test runs 15 steps
at lr 0.008 (CI time): 0.027 over steps 1-5, 0.223 over 8-12, 0.484 over 11-15. It asks
for a last-5 mean of at least 0.2 and 4x the first-5 mean; with the update switched off
(lr ~ 0) the reward stays at ~0.02 and the test fails.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import skyrl

TOY = Path(__file__).parent / "toy"
STEPS = 15


def test_tiny_model_learns_the_toy_task(tmp_path, ray_address):
    for f in TOY.iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / f.name)
    args = ["--max-steps", str(STEPS), "--set", "optim.lr=0.008", "--ray-address", ray_address]
    args += ["--set", "trainer.threads=1"]  # one torch thread a process: no oversubscribed cores
    skyrl("train", *args, cwd=tmp_path, timeout=300)
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    rewards = [
        json.loads(ln)["reward/mean"] for ln in (run / "metrics.jsonl").read_text().splitlines()
    ]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    print(f"mean reward: first 5 steps {first:.3f}, last 5 steps {last:.3f}")
    assert len(rewards) == STEPS
    assert last >= 0.2, rewards
    assert last >= 4 * first, rewards
