"""Write synthetic run directories (docs/run-format.md) for tests and screenshots.

Deterministic: the same arguments write the same files, apart from the times in
`status.json`, which are relative to now so a `running` run is not `stale`.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import yaml

_TASKS = ["orders_by_month", "top_customers", "late_shipments", "avg_basket", "churned_users"]


def config(env: str = "sql", model: str = "tiny", max_steps: int = 50) -> dict[str, Any]:
    """A small resolved-config-shaped dict (the sections the format document names)."""
    return {
        "model": {"name": model, "dtype": "float32"},
        "env": {"name": env, "max_turns": 4},
        "rollout": {"group_size": 4, "batch_tasks": 4, "temperature": 1.0},
        "algorithm": {"name": "grpo", "kl_coef": 0.0, "clip": 0.2},
        "optim": {"lr": 1e-5},
        "trainer": {"max_steps": max_steps, "save_every": 10, "keep_checkpoints": 2},
        "eval": {"every": 0},
        "tracking": {"backend": "none"},
        "ray": {"address": None},
        "environments": {},
        "project_dir": ".",
    }


def metric(step: int, t: float) -> dict[str, Any]:
    """One `metrics.jsonl` line with every documented key; the reward climbs with `step`."""
    mean = 0.8 * (1 - math.exp(-step / 15)) + 0.05 * math.sin(step)
    return {
        "step": step,
        "time": t,
        "reward/mean": round(mean, 4),
        "reward/std": 0.2,
        "reward/min": round(max(0.0, mean - 0.4), 4),
        "reward/max": round(min(1.0, mean + 0.3), 4),
        "reward/accuracy": round(mean, 4),
        "loss": round(0.5 / (1 + step), 5),
        "pg_loss": round(0.45 / (1 + step), 5),
        "kl": 0.0,
        "entropy": round(1.2 - 0.01 * min(step, 100), 4),
        "clip_frac": 0.01,
        "grad_norm": 0.7,
        "lr": 1e-5,
        "trained_tokens": 4000,
        "response_len/mean": round(120 - 40 * (1 - math.exp(-step / 10)), 1),
        "response_len/max": 256,
        "turns/mean": 2.5,
        "episodes": 16,
        "episodes/failed": 0,
        "groups/zero_variance": 0.25,
        "time/generate": 8.0,
        "time/train": 3.0,
        "time/sync": 0.5,
        "time/step": 11.5,
        "perf/episodes_per_s": 1.39,
        "perf/tokens_per_s": 240.0,
        "policy_version": step,
    }


def trajectory(step: int, i: int, rng: random.Random, tokens: int = 64) -> dict[str, Any]:
    """One `rollouts/step-N.jsonl` record with every documented key."""
    task = _TASKS[i % len(_TASKS)]
    error = "sqlite3.OperationalError: no such column: foo" if i % 7 == 3 else None
    reward = 0.0 if error else round(rng.random(), 3)
    turns = [
        {"role": "system", "text": "You answer questions by writing SQLite queries."},
        {"role": "user", "text": f"Task {task}: how many orders were placed per month?"},
        {
            "role": "assistant",
            "text": "SELECT strftime('%m', placed) AS m, COUNT(*) FROM orders GROUP BY m;",
        },
        # The SQL environment's observation: `format_table` output, then the turns left.
        {
            "role": "user",
            "text": "Error: no such column: foo\nTurns left: 2"
            if error
            else "m | COUNT(*)\n01 | 120\n02 | 98\n(2 rows)\nTurns left: 2",
        },
        {"role": "assistant", "text": f"The answer is 12 rows (step {step}, sample {i})."},
    ]
    mask = [0] * 20 + [1] * (tokens - 20)
    return {
        "step": step,
        "task_id": f"{task}-{i // 4}",
        "group_id": i // 4,
        "turns": turns,
        "prompt_len": 20,
        "token_ids": list(range(tokens)),
        "loss_mask": mask,
        "logprobs": [-0.5 if m else 0.0 for m in mask],
        "versions": [step - 1, step - 1],
        "reward": reward,
        "stop_reason": "error" if error else ("terminated" if i % 5 else "truncated"),
        "num_turns": 2,
        "response_len": sum(mask),
        "timings": {"generate": 0.4, "env": 0.01},
        "error": error,
        "info": {"correct": reward > 0.5, "error": error},
    }


def write_rollouts(run: Path, step: int, n: int, tokens: int = 64) -> None:
    """Write `rollouts/step-NNNNNN.jsonl` atomically, as the trainer does."""
    rng = random.Random(step)
    folder = run / "rollouts"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(trajectory(step, i, rng, tokens)) for i in range(n)]
    tmp = folder / f".tmp-step-{step:06d}.jsonl"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, folder / f"step-{step:06d}.jsonl")


def append_metric(run: Path, step: int) -> None:
    """Append one step's metrics line, as the trainer does."""
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(metric(step, time.time())) + "\n")


def write_status(run: Path, **fields: Any) -> None:
    """Merge `fields` into status.json, replacing the file atomically."""
    path = run / "status.json"
    status = json.loads(path.read_text()) if path.exists() else {}
    status.update(fields)
    tmp = run / ".status.json.tmp"
    tmp.write_text(json.dumps(status))
    os.replace(tmp, path)


def make_run(
    runs_dir: Path,
    run_id: str = "sql-20261130-120000",
    *,
    steps: int = 20,
    max_steps: int = 50,
    rollout_steps: int | None = None,
    per_step: int = 16,
    state: str = "running",
    env: str = "sql",
    model: str = "tiny",
    tokens: int = 64,
    torn_tail: bool = False,
) -> Path:
    """Write a run with `steps` metric lines and rollouts for the last `rollout_steps` steps."""
    run = runs_dir / run_id
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text(yaml.safe_dump(config(env, model, max_steps)))
    now = float(math.ceil(time.time()))  # whole seconds: a finished run's elapsed is fixed
    t0 = now - 11.5 * steps
    with (run / "metrics.jsonl").open("w") as f:
        for s in range(1, steps + 1):
            f.write(json.dumps(metric(s, t0 + 11.5 * s)) + "\n")
        if torn_tail:
            f.write('{"step": ' + str(steps + 1) + ', "reward/me')
    first = 1 if rollout_steps is None else max(1, steps - rollout_steps + 1)
    for s in range(first, steps + 1):
        write_rollouts(run, s, per_step, tokens)
    last = metric(steps, now)["reward/mean"] if steps else None
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))
    status: dict[str, Any] = {
        "state": state,
        "step": steps,
        "max_steps": max_steps,
        "pid": os.getpid(),
        "host": "localhost",
        "heartbeat": now,
        "last_reward": last,
        "env": env,
        "model": model,
        "error": "RuntimeError: CUDA out of memory" if state == "failed" else None,
        "started": started,
        "finished": None
        if state == "running"
        else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "tracker_run_id": "0123456789abcdef",
    }
    write_status(run, **status)
    return run
