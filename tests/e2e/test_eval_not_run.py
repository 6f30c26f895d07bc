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
