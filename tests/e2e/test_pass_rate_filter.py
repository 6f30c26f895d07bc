"""The pass-rate-filtered train set (`warmup.pass_rate_samples`) through the real `skyrl
train`, on the tiny model: after the warm-up it samples G answers per train task, keeps
the tasks whose pass rate is strictly between 0 and 1, says how many in the run log, and a
second run whose warm-up ends in the same weights reads the cached rates instead of
sampling again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.conftest import skyrl, with_tiny

# Reward and `correct` decided by the task: one always right, one never, two by a coin the
# sampled text throws (its length's parity), so only those two can have a rate in between.
ENV = """
import gymnasium as gym
from environments.spaces import TextSpace


class CoinEnv(gym.Env):
    stop_strings = ()

    def __init__(self, max_turns: int = 1, **kwargs):
        self.observation_space = TextSpace(10_000)
        self.action_space = TextSpace(10_000)
        self.kind = "coin"

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task = (options or {}).get("task")
        self.kind = task.answer
        return task.prompt, {}

    def step(self, action: str):
        right = {"always": True, "never": False}.get(self.kind, len(action) % 2 == 0)
        return "", float(right), True, False, {"correct": right}

    def demonstration(self, task):
        return "ok"
"""

KINDS = {"a": "always", "n": "never", "c1": "coin", "c2": "coin"}


def _project(tmp_path: Path) -> Path:
    (tmp_path / "coin_env.py").write_text(ENV)
    (tmp_path / "tasks.jsonl").write_text(
        "".join(
            json.dumps({"id": i, "env": "coin", "prompt": f"Flip ({i}).", "answer": kind}) + "\n"
            for i, kind in KINDS.items()
        )
    )
    config = {
        "environments": {"coin": "coin_env.py:CoinEnv"},
        "env": {"name": "coin", "tasks": "tasks.jsonl", "max_turns": 1},
        "model": {"name": "tiny"},
        "rollout": {"batch_size": 2, "group_size": 2, "max_new_tokens": 6},
        "warmup": {"sft_steps": 1, "batch_size": 2, "pass_rate_samples": 6},
        "trainer": {"max_steps": 1, "checkpoint_every": 1},
        "eval": {"limit": 0},
        "tracking": {"enabled": False},
    }
    (tmp_path / "skyrl.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


def _train(project: Path, runs: str, ray_address: str, cache: Path, *more: str):
    return skyrl(
        "train", "--config", "skyrl.yaml", "--runs-dir", runs, "--ray-address", ray_address,
        *more, cwd=project, env={"SKYRL_CACHE_DIR": str(cache)},
    )  # fmt: skip


def test_the_filter_keeps_tasks_between_0_and_1_and_a_repeat_reads_the_cache(tmp_path, ray_address):
    project, cache = _project(tmp_path), with_tiny(tmp_path / "cache")
    first = _train(project, "runs1", ray_address, cache)
    log = first.stdout + first.stderr
    assert "pass-rate filter: sampling 6 answers for each of 4 train tasks" in log, log
    # the sampling shows its progress and an ETA, as an evaluation does (1,224 episodes for
    # the SQL suite: most of an hour on a 2-core CPU)
    assert re.search(r"eval pass-rate 24/24 episodes \(\d+s, ETA 0m00s\)", log), log
    (run,) = (project / "runs1").iterdir()
    record = json.loads((run / "warmup" / "pass_rate.json").read_text())
    assert record["rates"]["a"] == 1.0 and record["rates"]["n"] == 0.0
    assert record["kept"] and set(record["kept"]) <= {"c1", "c2"}
    assert all(0 < record["rates"][i] < 1 for i in record["kept"])
    kept = len(record["kept"])
    assert f"pass-rate filter: kept {kept} of 4 train tasks" in log, log
    assert "1 always right, 1 never" in log
    # only kept tasks were trained on
    rollouts = (run / "rollouts" / "step-000001.jsonl").read_text().splitlines()
    assert {json.loads(r)["task_id"] for r in rollouts} <= set(record["kept"])
    (cached,) = (cache / "pass-rate").iterdir()
    assert cached.stem == record["key"]

    second = _train(project, "runs2", ray_address, cache)
    log2 = second.stdout + second.stderr
    assert "pass-rate filter: sampling" not in log2, log2
    assert f"reused from {cached}" in log2, log2
    assert f"pass-rate filter: kept {kept} of 4 train tasks" in log2, log2

    # a resume reads what the run kept (warmup/pass_rate.json), even with the cache gone
    cached.unlink()
    again = skyrl("train", "--resume", str(run), "--max-steps", "2", "--ray-address", ray_address,
                  cwd=project, env={"SKYRL_CACHE_DIR": str(cache)})  # fmt: skip
    log3 = again.stdout + again.stderr
    assert "pass-rate filter: sampling" not in log3 and "reused" not in log3, log3
    assert f"pass-rate filter: kept {kept} of 4 train tasks" in log3, log3
    rollouts = (run / "rollouts" / "step-000002.jsonl").read_text().splitlines()
    assert {json.loads(r)["task_id"] for r in rollouts} <= set(record["kept"])
