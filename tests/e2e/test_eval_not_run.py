"""`skyrl eval --env ANY`: a task the environment refused (its reset raised: a PostgreSQL DSN
the SQL env will not use, a Harbor task it cannot build) is never a quiet 0. The command
names it and exits non-zero, for every environment, not only the shell's oracle."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import skyrl, stand_in_openai

REFUSING_ENV = '''
import gymnasium as gym
from environments.spaces import TextSpace


class RefusingEnv(gym.Env):
    """Refuses a task whose metadata says so, as an env refuses a database it will not use."""

    def __init__(self, max_turns=1):
        self.observation_space = TextSpace(10_000)
        self.action_space = TextSpace(10_000)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task = options["task"]
        if (task.get("metadata") or {}).get("dsn"):
            raise ValueError(f"the DSN {task['metadata']['dsn']} connects as a superuser")
        return task["prompt"], {}

    def step(self, action):
        return "", float("42" in action), True, False, {"correct": "42" in action}
'''
ROWS = [
    {"id": "fine", "env": "refusing", "prompt": "Say 42."},
    {"id": "refused", "env": "refusing", "prompt": "Say 42.", "metadata": {"dsn": "pg://root"}},
]


def test_a_refused_task_makes_eval_exit_non_zero_and_says_why(tmp_path: Path) -> None:
    """Before: the table showed 50% with errors 1 and the command exited 0."""
    (tmp_path / "refusing_env.py").write_text(REFUSING_ENV)
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "skyrl.yaml").write_text(
        "env:\n  name: refusing\nenvironments:\n  refusing: refusing_env.py:RefusingEnv\n"
    )
    with stand_in_openai(lambda body: "42") as url:
        done = skyrl(
            "eval", "--env", "refusing", "--tasks", "tasks.jsonl", "--model", f"openai:m@{url}",
            "--output", "out", "--no-tracking", cwd=tmp_path, check=False,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 of 2 episodes did not run to the end" in done.stderr, done.stderr
    assert "connects as a superuser" in done.stderr, done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["errors"] == 1 and report["accuracy"] == 0.5, report


def _harbor_task(root: Path, dockerfile: str) -> None:
    for sub in ("tests", "solution", "environment"):
        (root / sub).mkdir(parents=True)
    (root / "instruction.md").write_text("Do it.\n")
    (root / "task.toml").write_text('version = "1.0"\n')
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    (root / "environment" / "Dockerfile").write_text(dockerfile)


def test_a_harbor_episode_that_fails_to_start_is_that_tasks_sentence(tmp_path: Path) -> None:
    """An ENTRYPOINT that kills the shell it runs before (as a real task's sandbox once
    failed to start mid-folder): that task is not run, with the reason, and the next one
    still runs. Before: `evaluation failed: RuntimeError ...` and no task had a reward."""
    _harbor_task(
        tmp_path / "tasks" / "a-broken",
        'FROM debian:bookworm\nENTRYPOINT ["sh", "-c", "sleep 0.2; kill -9 $PPID"]\n',
    )
    _harbor_task(tmp_path / "tasks" / "b-fine", "FROM debian:bookworm\n")
    done = skyrl(
        "eval", "--env", "shell", "--agent", "oracle", "--tasks", "tasks", "--output", "out",
        cwd=tmp_path, check=False, env={"HOME": str(tmp_path)},
    )  # fmt: skip # the command line reads as typed
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "a-broken: not run (its episode failed: the sandboxed bash did not start)" in done.stdout
    assert "b-fine: reward 1" in done.stdout, done.stdout
    results = json.loads((tmp_path / "out" / "summary.json").read_text())["results"]
    assert results["b-fine"]["reward"] == 1 and results["a-broken"]["reward"] is None
