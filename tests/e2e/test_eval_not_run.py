"""`skyrl eval --env ANY`: a task the environment refused (its reset raised: a PostgreSQL DSN
the SQL env will not use, a Harbor task it cannot build) is never a quiet 0. The command
names it and exits non-zero, for every environment, not only the shell's oracle."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import BIN, skyrl, stand_in_openai

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


def _harbor_task(root: Path, dockerfile: str, solve: str = "true") -> None:
    for sub in ("tests", "solution", "environment"):
        (root / sub).mkdir(parents=True)
    (root / "instruction.md").write_text("Do it.\n")
    (root / "task.toml").write_text('version = "1.0"\n')
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (root / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\n")
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
    assert (
        "a-broken: not run (its episode failed: the sandboxed bash did not start (" in done.stdout
    )
    assert "b-fine: reward 1" in done.stdout, done.stdout
    results = json.loads((tmp_path / "out" / "summary.json").read_text())["results"]
    assert results["b-fine"]["reward"] == 1 and results["a-broken"]["reward"] is None


REFUSES_A_SHELL = (  # passes the build's ENTRYPOINT probe (`/bin/sh -c sleep ...`), refuses bash
    'FROM debian:bookworm\nENTRYPOINT ["sh", "-c", "case $0 in bash) echo this entrypoint '
    'wants /etc/app.conf >&2; exit 3;; esac; exec \\"$0\\" \\"$@\\""]\n'
)


def test_a_folder_says_each_phase_and_each_result_as_it_happens(tmp_path: Path) -> None:
    """Not a terminal (a pipe, as in a log): a plain line on stderr as each task's image is
    built and as each episode starts, and each task's result on stdout as it ends, not all
    at exit; a shell that dies at start says what it printed. Before: nothing at all until
    the whole folder was done (stdout was block-buffered, builds said nothing), and the
    failure read `the sandboxed bash did not start` with no cause."""
    _harbor_task(tmp_path / "tasks" / "a-refuses", REFUSES_A_SHELL)
    _harbor_task(tmp_path / "tasks" / "b-slow", "FROM debian:bookworm\n", solve="sleep 6")
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("PYTHONUNBUFFERED", None)
    proc = subprocess.Popen(
        [str(BIN / "skyrl"), "eval", "--env", "shell", "--agent", "oracle", "--tasks", "tasks"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip # the command line reads as typed
    try:
        first = proc.stdout.readline()  # type: ignore[union-attr]
        alive = proc.poll() is None  # b-slow's solution still sleeps: the line came at once
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert first.startswith("a-refuses: not run (its episode failed:"), first + out + err
    assert (
        "the sandboxed bash did not start (it printed: this entrypoint wants /etc/app.conf)"
        in first
    )
    assert alive, "the first task's line came only when the command ended"
    assert "b-slow: reward 1" in out and proc.returncode == 1, out + err
    lines = err.splitlines()
    for phase in ("image 1/2: a-refuses", "image 2/2: b-slow", "episode 1/2: a-refuses (oracle)"):
        assert any(line.startswith(phase) for line in lines), (phase, err)
    assert any(line.startswith("episode 2/2: b-slow (oracle)") for line in lines), err
