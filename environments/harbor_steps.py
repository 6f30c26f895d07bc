"""Harbor's multi-step tasks (`[[steps]]` in task.toml, `steps/<name>/`), as Harbor 0.26 runs
them: one live environment for all steps, and for each step in order

1. `steps/<name>/workdir/` copied into the WORKDIR, then its `setup.sh` (if any) run there;
2. the step's healthcheck (`[steps.healthcheck]`), retried as Docker's HEALTHCHECK is;
3. the agent on `steps/<name>/instruction.md` (the oracle: `steps/<name>/solution/solve.sh`);
4. the step's verifier: the task's top-level `tests/` with the step's `tests/` over it at
   `/tests`, `[steps.verifier]` env (over the task's `[verifier].env`) and time limit.

A step whose rewards miss its `min_reward` (a number gates `reward`; a table each key it
names; a missing key or a verifier without a reward counts as below) ends the task there.
The task's rewards are `multi_step_reward_strategy`'s: `mean` (default) is each key's mean
over the graded steps (a key a step lacks counts 0), `final` the last graded step's.
`tasks.harbor.load_harbor_task` reads the steps into `task.metadata["steps"]`.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from environments import harbor
from environments.bash import chown_tree
from environments.sandbox import Sandbox

__all__ = ["aggregate", "enter", "passes", "solution_dir", "tests_dir"]

SETUP_TIMEOUT_S = 600.0


def tests_dir(task_dir: Path, step: dict[str, Any] | None, dest: Path) -> Path:
    """The verifier's `/tests` of a step, made at `dest`: the task's `tests/`, with the step's
    own `tests/` over it (its files win); for a one-step task, `tests/` itself."""
    top = task_dir / "tests"
    if step is None:
        return top
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for source in (top, task_dir / step["dir"] / "tests"):
        if source.is_dir():
            shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
    return dest


def solution_dir(task_dir: Path, step: dict[str, Any] | None) -> Path:
    """Where the oracle's `solve.sh` of a step (or of a one-step task) is."""
    if step is not None and (task_dir / step["dir"] / "solution" / "solve.sh").is_file():
        return task_dir / step["dir"] / "solution"
    return task_dir / "solution"


def enter(
    layout: harbor.Layout, sandbox: Sandbox, task_dir: Path, step: dict[str, Any]
) -> str | None:
    """Before the agent's turn at `step`: its `workdir/` into the WORKDIR, its `setup.sh` run
    there, its healthcheck passed. None, or why the step cannot start (one sentence)."""
    workdir = layout.image.workdir
    source = task_dir / step["dir"] / "workdir"
    if source.is_dir():
        harbor._merge(source, layout.root, workdir)
        chown_tree(layout.host_path(workdir), sandbox.uid)
        if (source / "setup.sh").is_file():
            done = sandbox.run(["bash", f"{workdir}/setup.sh"], timeout=SETUP_TIMEOUT_S)
            if done.returncode != 0:
                last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or [""]
                return f"step {step['name']}: workdir/setup.sh failed (exit {done.returncode}): {last[0]}"
    check = step.get("healthcheck")
    if check is None:
        return None
    for attempt in range(int(check["retries"]) + 1):
        if attempt:
            time.sleep(float(check["interval_sec"]))
        done = sandbox.run(
            ["bash", "-c", check["command"]], timeout=float(check["timeout_sec"]) or 30.0
        )
        if done.returncode == 0:
            return None
    return f"step {step['name']}: its healthcheck `{check['command']}` failed {int(check['retries']) + 1} times"


def passes(min_reward: float | dict[str, float] | None, rewards: dict[str, float] | None) -> bool:
    """Whether a step's rewards meet its `min_reward` (None: always)."""
    if min_reward is None:
        return True
    if rewards is None:
        return False
    gates = {"reward": min_reward} if isinstance(min_reward, float) else min_reward
    return all(rewards.get(key, float("-inf")) >= low for key, low in gates.items())


def aggregate(results: list[dict[str, float] | None], strategy: str) -> dict[str, float]:
    """The task's rewards from its steps' (None: a step graded without a reward)."""
    graded = [r for r in results if r is not None]
    if strategy == "final":
        return dict(results[-1] or {}) if results else {}
    keys = sorted({k for r in graded for k in r})
    return {k: sum(r.get(k, 0.0) for r in graded) / len(graded) for k in keys} if graded else {}
