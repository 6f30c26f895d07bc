"""Greedy accuracy of the current policy on a task split (before/after training)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from agents.agent_loop import Budget, GenerateFn, episode_seed, run_episodes
from agents.chat import ChatFormat
from agents.trajectory import Trajectory
from tasks.task import Task


def is_correct(traj: Trajectory) -> bool:
    """An environment says `correct` in its final info; otherwise full reward counts."""
    if "correct" in traj.info:
        return bool(traj.info["correct"])
    return traj.error is None and traj.reward >= 1.0


def evaluate(
    generate: GenerateFn,
    make_env: Callable[[], gym.Env],
    chat: ChatFormat,
    tasks: list[Task],
    budget: Budget,
    pool: ThreadPoolExecutor,
    seed: int,
    batch: int = 16,
) -> tuple[dict[str, Any], list[Trajectory]]:
    """Run each task once (the generate function decides greedy or not); report accuracy."""
    trajs: list[Trajectory] = []
    for i in range(0, len(tasks), batch):
        chunk = tasks[i : i + batch]
        seeds = [episode_seed(seed, "eval", t.id) for t in chunk]
        trajs += run_episodes(
            generate, make_env, chat, chunk, list(range(len(chunk))), seeds, budget, pool
        )
    by: dict[str, dict[str, list[bool]]] = {
        "difficulty": defaultdict(list),
        "database": defaultdict(list),
    }
    for task, traj in zip(tasks, trajs, strict=True):
        ok = is_correct(traj)
        for key in by:
            if key in task.metadata:
                by[key][str(task.metadata[key])].append(ok)
    n = len(trajs)
    report: dict[str, Any] = {
        "n": n,
        "accuracy": sum(map(is_correct, trajs)) / max(1, n),
        "mean_reward": sum(t.reward for t in trajs) / max(1, n),
        "errors": sum(t.error is not None for t in trajs),
    }
    for key, groups in by.items():
        if groups:
            report[f"by_{key}"] = {k: sum(v) / len(v) for k, v in sorted(groups.items())}
    return report, trajs
