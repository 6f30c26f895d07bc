"""Accuracy (and pass@k) of a policy on a task split: before/after training and `skyrl eval`."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from agents.agent_loop import Budget, GenerateFn, episode_seed, run_episodes
from agents.chat import ChatFormat
from agents.trajectory import Trajectory
from environments.contract import Extras
from tasks.task import Task


def is_correct(traj: Trajectory) -> bool:
    """An environment says `correct` in its final info; otherwise full reward counts."""
    if "correct" in traj.info:
        return bool(traj.info["correct"])
    return traj.error is None and traj.reward >= 1.0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021) from n samples of which c are correct:
    1 - C(n-c, k) / C(n, k), the chance that k of the n drawn without replacement hold one."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def ks_for(samples: int) -> list[int]:
    """The k reported for `samples` samples per task: 1, powers of two, and `samples`."""
    ks = {1, samples} | {2**i for i in range(1, samples.bit_length()) if 2**i < samples}
    return sorted(ks)


def evaluate(
    generate: GenerateFn,
    make_env: Callable[[], gym.Env],
    chat: ChatFormat,
    tasks: list[Task],
    budget: Budget,
    pool: ThreadPoolExecutor,
    seed: int,
    batch: int = 16,
    *,
    samples: int = 1,
    on_done: Callable[[int], None] | None = None,
    by: Sequence[str] | None = None,
) -> tuple[dict[str, Any], list[Trajectory]]:
    """Run each task `samples` times (the generate function decides greedy or not).

    Returns the report (accuracy = pass@1 over every episode; `pass@k` for each k of
    `ks_for(samples)` when samples > 1; `by_<key>` accuracy for each metadata key in `by`,
    default the environment's `report_by`, with counts and pass@k in `breakdown`) and the
    trajectories, task-major (task 0's samples first). `on_done(n)` is called after every
    batch of n episodes.
    """
    flat = [(i, t, s) for i, t in enumerate(tasks) for s in range(samples)]
    trajs: list[Trajectory] = []
    for start in range(0, len(flat), batch):
        chunk = flat[start : start + batch]
        # sample 0 keeps the seed greedy evaluation always used, so reports stay comparable
        seeds = [
            episode_seed(seed, "eval", t.id) if s == 0 else episode_seed(seed, "eval", t.id, s)
            for _, t, s in chunk
        ]
        trajs += run_episodes(
            generate, make_env, chat, [t for _, t, _ in chunk], [i for i, _, _ in chunk], seeds,
            budget, pool,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them
        if on_done is not None:
            on_done(len(chunk))
    correct_T = [
        sum(map(is_correct, trajs[i * samples : (i + 1) * samples])) for i in range(len(tasks))
    ]
    n = len(trajs)
    report: dict[str, Any] = {
        "n": n,
        "accuracy": sum(map(is_correct, trajs)) / max(1, n),
        "mean_reward": sum(t.reward for t in trajs) / max(1, n),
        "errors": sum(t.error is not None for t in trajs),
    }
    if samples > 1:
        report.update(tasks=len(tasks), samples=samples)
        report.update(_pass_at(correct_T, samples))
    breakdown: dict[str, dict[str, dict[str, float]]] = {}
    for key, groups in _groups(tasks, report_keys(make_env) if by is None else by).items():
        report[f"by_{key}"] = {
            v: sum(correct_T[i] for i in idx) / (len(idx) * samples) for v, idx in groups.items()
        }
        breakdown[key] = {
            v: {"tasks": len(idx), **_pass_at([correct_T[i] for i in idx], samples)}
            for v, idx in groups.items()
        }
    if breakdown:
        report["breakdown"] = breakdown
    return report, trajs


def _pass_at(correct_T: list[int], samples: int) -> dict[str, float]:
    """Mean pass@k over tasks for every reported k (pass@1 = plain accuracy)."""
    return {
        f"pass@{k}": sum(pass_at_k(samples, c, k) for c in correct_T) / max(1, len(correct_T))
        for k in ks_for(samples)
    }


def report_keys(make_env: Callable[[], gym.Env]) -> tuple[str, ...]:
    """The metadata keys an environment asks reports to break accuracy down by: its
    `report_by` (none declared, none shown: a task's `word` or id makes no useful row)."""
    env = make_env()
    try:
        return Extras.of(env).report_by
    finally:
        env.close()


def _groups(tasks: list[Task], keys: Sequence[str]) -> dict[str, dict[str, list[int]]]:
    """metadata key -> value -> task indices, for the given keys' short scalar values."""
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, task in enumerate(tasks):
        for key in keys:
            value = task.metadata.get(key)
            if isinstance(value, str | int | bool) and len(str(value)) <= 40:
                out[key][str(value)].append(i)
    return {k: dict(sorted(g.items())) for k, g in sorted(out.items())}
