"""Issue 13, items 2, 4, 5, 10, 16, through the real `skyrl` command on a real local Ray.

- a step where every episode failed stops the run (state `failed`, exit 1, the first error);
  a step where more than trainer.max_failed_fraction failed warns with the first error;
- a task file without `split` says that evaluation is on the training tasks, and
  eval.holdout holds out a part that is never trained on;
- a run whose groups have no reward variance says so once, and `skyrl watch` shows it;
- `--resume` on a finished run does nothing (exit 0) unless --max-steps goes further;
- the runs folder holds only runs: MLflow's store lives in runs/.mlflow/.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from tests.conftest import skyrl

FLAKY_ENV = '''
import gymnasium as gym

from environments.spaces import TextSpace


class FlakyEnv(gym.Env):
    """Reward by the parity of the reply's length; its grader crashes on tasks marked `fail`."""

    stop_strings = ()

    def __init__(self, max_turns: int = 1, **kwargs):
        self.observation_space = TextSpace(10_000)
        self.action_space = TextSpace(10_000)
        self.task = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.task = (options or {}).get("task")
        return self.task.prompt, {}

    def step(self, action: str):
        if self.task.metadata.get("fail"):
            raise RuntimeError(f"grader crashed on {self.task.id}")
        reward = float(len(action) % 2)
        return "", reward, True, False, {"correct": reward == 1.0}
'''

FLAKY_YAML = """
environments:
  flaky: flaky_env.py:FlakyEnv
env:
  name: flaky
  tasks: tasks.jsonl
  max_turns: 1
model:
  name: tiny
rollout:
  batch_size: 4
  group_size: 2
  max_new_tokens: 8
trainer:
  max_steps: 1
eval:
  limit: 0
tracking:
  enabled: false
"""


def _flaky_project(tmp_path: Path, failing: set[int], n: int = 4) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "flaky_env.py").write_text(FLAKY_ENV)
    (proj / "skyrl.yaml").write_text(FLAKY_YAML)
    rows = [
        {"id": f"t{i}", "env": "flaky", "prompt": f"say {i}", "metadata": {"fail": i in failing}}
        for i in range(n)
    ]
    (proj / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return proj


def _only_run(proj: Path) -> Path:
    (run,) = [p for p in (proj / "runs").iterdir() if not p.name.startswith(".")]
    return run


# ----------------------------------------------------------- item 2: failed episodes


def test_a_step_where_every_episode_failed_stops_the_run(tmp_path, ray_address):
    proj = _flaky_project(tmp_path, failing={0, 1, 2, 3})
    proc = skyrl("train", "--max-steps", "3", "--ray-address", ray_address, cwd=proj, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: every episode of step 1 failed (8 of 8)"), last
    assert "RuntimeError: grader crashed on t" in last
    run = _only_run(proj)
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "failed" and "grader crashed on" in status["error"]
    assert not (run / "metrics.jsonl").exists()  # step 1 was no training step
    rollouts = (run / "rollouts" / "step-000001.jsonl").read_text().splitlines()
    assert len(rollouts) == 8 and all(json.loads(r)["error"] for r in rollouts)


def test_a_failed_fraction_warns_and_an_unsplit_file_says_so(tmp_path, ray_address):
    proj = _flaky_project(tmp_path, failing={2})
    proc = skyrl(
        "train",
        "--set",
        "trainer.max_failed_fraction=0.2",
        "--set",
        "eval.limit=2",
        "--set",
        "eval.after=false",
        "--ray-address",
        ray_address,
        cwd=proj,
    )
    err = proc.stderr
    assert "warning: 2 of 8 episodes of step 1 failed" in err, err
    assert "RuntimeError: grader crashed on t2" in err
    assert "tasks.jsonl has no `split` field" in err and "eval.holdout" in err
    status = json.loads((_only_run(proj) / "status.json").read_text())
    assert status["state"] == "finished"


def test_eval_holdout_is_never_trained_on(tmp_path, ray_address):
    proj = _flaky_project(tmp_path, failing=set(), n=8)
    proc = skyrl(
        "train",
        "--max-steps",
        "2",
        "--set",
        "eval.holdout=0.25",
        "--set",
        "eval.limit=8",
        "--set",
        "eval.after=false",
        "--ray-address",
        ray_address,
        cwd=proj,
    )
    assert "no `split` field" not in proc.stderr
    run = _only_run(proj)
    before = json.loads((run / "eval" / "before.json").read_text())
    assert before["n"] == 2, before  # 25% of 8 tasks
    held = {json.loads(ln)["task_id"] for ln in (run / "eval" / "before.jsonl").open()}
    trained = {
        json.loads(ln)["task_id"]
        for f in (run / "rollouts").glob("step-*.jsonl")
        for ln in f.open()
    }
    assert len(held) == 2 and len(trained) == 6 and held.isdisjoint(trained)
    # `skyrl eval` of the run scores the same held-out tasks
    skyrl("eval", "--model", str(run), "--no-tracking", "--output", "ev", cwd=proj)
    scored = {json.loads(ln)["task_id"] for ln in (proj / "ev" / "results.jsonl").open()}
    assert scored == held


# ------------------------------------- items 5, 10, 16 on one finished run of 3 steps


@pytest.fixture(scope="module")
def finished(tmp_path_factory, ray_address):
    """A finished `--env math --model tiny` run: the random model never answers, so every
    group has one reward for all its samples (no learning signal)."""
    cwd = tmp_path_factory.mktemp("finished")
    t0 = time.perf_counter()
    proc = skyrl(
        "train",
        "--env",
        "math",
        "--model",
        "tiny",
        "--max-steps",
        "3",
        "--run-name",
        "flat",
        "--set",
        "eval.limit=2",
        "--set",
        "rollout.batch_size=2",
        "--ray-address",
        ray_address,
        cwd=cwd,
    )
    return cwd, _only_run(cwd), proc, time.perf_counter() - t0


def test_no_learning_signal_is_said_once(finished):
    _, run, proc, _ = finished
    metrics = [json.loads(ln) for ln in (run / "metrics.jsonl").open()]
    assert [m["groups/zero_variance"] for m in metrics] == [1.0, 1.0, 1.0]
    assert proc.stderr.count("gave every sample the same reward") == 1, proc.stderr
    assert "rollout.group_size" in proc.stderr and "warmup.sft_steps" in proc.stderr


def test_watch_shows_no_learning_signal(finished):
    from tests.tui.test_app import SIZE, screen_text
    from tui.app import RunScreen, WatchApp

    cwd, run, _, _ = finished

    async def body() -> None:
        app = WatchApp(runs_dir=cwd / "runs", run_dir=run)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert isinstance(app.screen, RunScreen)
            assert "no learning signal" in screen_text(app)

    asyncio.run(body())
    once = skyrl("watch", "--once", str(run), cwd=cwd).stdout
    assert "no learning signal" in once


def test_runs_folder_holds_only_runs_and_mlflow_lives_in_a_dot_folder(finished):
    cwd, run, _, _ = finished
    assert sorted(os.listdir(cwd / "runs")) == [".mlflow", run.name]
    db = cwd / "runs" / ".mlflow" / "mlflow.db"
    with sqlite3.connect(db) as con:
        names = {r[0] for r in con.execute("select name from runs")}
        steps = {r[0] for r in con.execute("select step from metrics where key='reward/mean'")}
    assert run.name in names and steps == {1, 2, 3}
    assert (cwd / "runs" / ".mlflow" / "artifacts").is_dir()  # the final model's artifacts
    listed = [json.loads(ln) for ln in skyrl("runs", "--json", cwd=cwd).stdout.splitlines()]
    assert [r["id"] for r in listed] == [run.name]


def test_resume_of_a_finished_run_does_nothing_unless_asked_for_more(finished, ray_address):
    cwd, run, _, _ = finished
    watched = ["metrics.jsonl", "status.json", "eval/after.json", "eval/before.json"]
    stamps = {f: (run / f).stat().st_mtime_ns for f in watched}
    t0 = time.perf_counter()
    proc = skyrl("train", "--resume", str(run), "--ray-address", ray_address, cwd=cwd)
    assert time.perf_counter() - t0 < 8.0
    assert "is finished (step 3/3); nothing to do" in proc.stdout
    assert "--max-steps N (N > 3)" in proc.stdout
    assert {f: (run / f).stat().st_mtime_ns for f in watched} == stamps
    same = skyrl("train", "--resume", str(run), "--max-steps", "3", cwd=cwd)
    assert "nothing to do" in same.stdout
    more = skyrl(
        "train", "--resume", str(run), "--max-steps", "4", "--ray-address", ray_address, cwd=cwd
    )
    assert "finished" in more.stdout
    metrics = [json.loads(ln) for ln in (run / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 4
