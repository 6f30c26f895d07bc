"""`skyrl eval --env shell --agent oracle|noop`: Harbor tasks without a model.

`oracle` runs each task's `solution/solve.sh` as Harbor's oracle agent does (the solution
shown at `/solution` to that one command, never to a policy), `noop` submits at once; both
are then graded by the task's own verifier. Every task's image is built (or read from the
cache) first, and a task whose Dockerfile cannot be honoured here is reported in one line
before any episode runs, and counted as not run (never as a silent 0).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from trainers.progress import close_live, phase

AGENTS = ("oracle", "noop")
_ERROR_LINE = re.compile(r"error|fail|No module named|not found|denied|assert", re.IGNORECASE)


_BAR = re.compile(r"^=+ .* =+$")
"""pytest's section bars (`=== 2 failed in 0.03s ===`): a count, never the cause."""


def last_error_line(output: str) -> str:
    """The verifier's last line that reads as an error, else its last line ('' for none);
    pytest's bars are skipped, so a pytest run gives its last `FAILED test - Error` line."""
    every = [ln.strip() for ln in output.splitlines() if ln.strip()]
    lines = [ln for ln in every if not _BAR.match(ln)] or every  # `=== no tests ran ===`
    return next(
        (ln for ln in reversed(lines) if _ERROR_LINE.search(ln)), lines[-1] if lines else ""
    )


def _say(line: str) -> None:
    """A result line on stdout, below the live line in a terminal (stdout is line-buffered
    by `skyrl_cli.main`, so a log or pipe sees each task as it ends, not all at exit)."""
    close_live()
    print(line)


def _eta(spent_s: list[float], left: int) -> str:
    """', ETA 1m20s' from the mean of the episodes so far; '' before the first."""
    if not spent_s or left <= 0:
        return ""
    s = int(sum(spent_s) / len(spent_s) * left)
    return f", ETA {s // 60}m{s % 60:02d}s"


def _why_zero(
    verifier_output: str, stand_in: str, short_of: str = "", hidden: list[str] | None = None
) -> str:
    """What a 0's line adds: the verifier's last error line, how the image's stand-in
    differs from the real image (a Python version, a digest read as a tag), the CPUs or
    memory task.toml asks for beyond the machine's, and the build's RUN steps that exited 0
    after a failed download, where there are such."""
    last = last_error_line(verifier_output)
    return (
        (f" (verifier: {last})" if last else "")
        + (f" (stand-in: {stand_in})" if stand_in else "")
        + (f" (machine: {short_of})" if short_of else "")
        + "".join(f" (build: {h})" for h in hidden or [])
    )


def _task_dir(task: Any) -> Path:
    return Path(task.metadata["task_dir"])


def harbor_tasks(tasks: Path | None, split: str | None) -> tuple[list[Any], dict[str, str]]:
    """The bundled split, or the Harbor folder(s) at `tasks` (a task, or a folder of them),
    and the folders of a folder that cannot load (name -> why): those are skipped, reported
    and counted as not run, and the rest of the folder still runs."""
    from tasks.harbor import load_harbor_task, load_suite

    if tasks is None:
        return load_suite(split or "dev"), {}
    if (tasks / "task.toml").is_file():
        return [load_harbor_task(tasks)], {}
    if tasks.is_dir():
        found = sorted(p for p in tasks.iterdir() if (p / "task.toml").is_file())
        loaded, skipped = [], {}
        for folder in found:
            try:
                loaded.append(load_harbor_task(folder))
            except ValueError as e:
                skipped[folder.name] = str(e)
        if found:
            return loaded, skipped
    raise ValueError(f"--tasks {tasks} is neither a Harbor task folder nor a folder of them")


def run_reference_agent(
    agent: str,
    tasks: list[Any],
    skipped: dict[str, str],
    sets: dict[str, Any],
    output: Path | None = None,
) -> dict[str, Any]:
    """Run `agent` on each task; print the pre-flight lines, one line per task (`skipped`:
    tasks that could not load, name -> why; a 0 with the verifier's last error line), the
    total. `output`: each task's `/logs` (agent/, verifier/) kept under `output/<task>/`, and
    `output/summary.json` (each task's reward, and its build and episode seconds)."""
    from environments import harbor
    from environments.registry import BUILTINS
    from environments.shell import ShellEnv

    if agent not in AGENTS:
        raise ValueError(f"unknown --agent {agent!r} for --env shell; known: {', '.join(AGENTS)}")
    blocked = {}
    results: dict[str, Any] = {}
    for name, why in skipped.items():
        results[name] = {"reward": None, "not_run": why}
        _say(f"{name}: not run ({why}).")
    BUILTINS["shell"].check(sets)  # env.kwargs as train checks them: one sentence, no traceback
    env = ShellEnv(**sets)
    n = len(tasks)
    try:
        built: dict[str, float] = {}
        hidden: dict[str, list[str]] = {}
        for i, task in enumerate(tasks, 1):  # a root file system and layers: minutes, said
            phase(f"image {i}/{n}: {task.id} (built once, then read from the cache)")
            start = time.monotonic()
            img = harbor.image(_task_dir(task), env.harbor_options)
            built[task.id] = time.monotonic() - start
            if output is not None:  # whether the task runs or its build stops it here
                harbor.save_build_log(img, output / task.id)
            hidden[task.id] = img.hidden_failures
            line = harbor.preflight_line(task.id, img)
            if line is not None:
                differs = harbor.stand_in(_task_dir(task), env.harbor_options)
                line += f" (stand-in: {differs})" if differs else ""
                line += f" (build log: {output / task.id / 'build.log'})" if output else ""
                blocked[task.id] = line
                _say(f"pre-flight: {line}")
        spent: list[float] = []
        for i, task in enumerate(tasks, 1):
            if task.id in blocked:
                results[task.id] = {"reward": None, "not_run": blocked[task.id]}
                _say(f"{task.id}: not run (see pre-flight)")
                continue
            left = sum(t.id not in blocked for t in tasks[i - 1 :])
            phase(f"episode {i}/{n}: {task.id} ({agent}){_eta(spent, left)}")
            start = time.monotonic()
            try:
                reward, info = _episode(env, task, agent)
            except (RuntimeError, OSError, ValueError) as e:  # this task's sandbox, not the run
                results[task.id] = {"reward": None, "not_run": f"its episode failed: {e}"}
                _say(f"{task.id}: not run (its episode failed: {e})")
                continue
            took = time.monotonic() - start
            spent.append(took)
            if output is not None:
                env.save_logs(output / task.id)
            results[task.id] = {"reward": reward, "rewards": info["rewards"]}
            results[task.id] |= {"build_s": round(built[task.id], 1), "episode_s": round(took, 1)}
            named = ", ".join(f"{k}={v:g}" for k, v in info["rewards"].items())
            why = f" ({info['reward_error']})" if info["reward_error"] else ""
            if reward <= 0:
                why += _why_zero(
                    info["verifier"]["output"],
                    harbor.stand_in(_task_dir(task), env.harbor_options),
                    harbor.short_of(_task_dir(task)),
                    hidden[task.id],
                )
            _say(f"{task.id}: reward {reward:g} [{named}]{why}")
    finally:
        env.close()
    ran = [r["reward"] for r in results.values() if r["reward"] is not None]
    mean = sum(ran) / len(ran) if ran else 0.0
    _say(
        f"{agent}: mean reward {mean:.3f} over {len(ran)} tasks run, {len(results) - len(ran)} not run"
    )
    summary = {"agent": agent, "results": results, "mean_reward": mean}
    if output is not None:  # with each task's build and episode seconds
        output.mkdir(parents=True, exist_ok=True)
        (output / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _episode(env: Any, task: Any, agent: str) -> tuple[float, dict[str, Any]]:
    """One episode of `agent` on `task`: the reward and the last step's info. A multi-step
    task's oracle runs each step's solve.sh and submits it, step after step."""
    env.reset(options={"task": task})
    while True:
        if agent == "oracle":
            env.run_oracle()
        _, reward, terminated, truncated, info = env.step("<submit/>")
        if terminated or truncated:
            return reward, info
