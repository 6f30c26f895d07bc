"""Async vs sync on an environment-latency-bound workload: trained samples per second and
the reward curve, side by side (issue 18; results in docs/benchmarks.md, "Async vs sync").

    python benchmarks/async_vs_sync.py                          # 20 steps, delay 1 s, k = 2
    python benchmarks/async_vs_sync.py --steps 30 --delay 0.5 --seeds 0 1 --out result.json

For each seed, runs the real `skyrl train` twice on the same project: the toy digits task
behind benchmarks/latency_env.py (each environment step sleeps a log-normal delay, median
`--delay` s, shape `--sigma`; `--turns` model turns an episode), `tiny` model, once with
`trainer.schedule=sync` and once with `trainer.schedule=async` and
`async.max_staleness=--staleness`. Same seed, same steps, same batch (P x G samples a step).

Trained samples per second = samples that carried loss (not failed, not dropped for
staleness; read from the rollouts) / the summed step times of metrics.jsonl (setup and
evaluation excluded on both sides). The reward curve is reward/mean per step. An async
step trains on samples of a policy up to k updates older than sync's at the same step, so
the reward is also compared by the policy that sampled (the newest version among a
sample's tokens: the conservative side for async): the reward of the policy after the same
number of trained samples. `--schedules sync` alone measures sync's seed spread (its
numbers do not depend on the delay: `--delay 0` is quick). After training, both final
policies are scored greedily on the `--eval` tasks, and by their mean reward over
`--eval-samples` samples a task at the training temperature (no delay): greedy decoding of
the toy task saturates, the sampled reward does not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def project(folder: Path, a: argparse.Namespace, schedule: str, seed: int) -> None:
    shutil.copy(ROOT / "benchmarks" / "latency_env.py", folder)
    tasks = (ROOT / "tests" / "e2e" / "toy" / "tasks.jsonl").read_text()
    (folder / "tasks.jsonl").write_text(tasks.replace('"env": "digits"', '"env": "slow"'))
    (folder / "skyrl.yaml").write_text(
        f"""\
environments:
  slow: latency_env.py:SlowDigitsEnv
env:
  name: slow
  tasks: tasks.jsonl
  max_turns: {a.turns}
  kwargs: {{turns: {a.turns}, delay_s: {a.delay}, delay_sigma: {a.sigma}}}
model:
  name: tiny
rollout:
  batch_size: {a.batch}
  group_size: {a.group}
  max_new_tokens: 12
  env_workers: {a.batch * a.group * (a.staleness + 1)}
optim:
  lr: 0.003
trainer:
  max_steps: {a.steps}
  checkpoint_every: {a.steps}
  schedule: {schedule}
  seed: {seed}
async:
  max_staleness: {a.staleness}
eval:
  limit: {a.eval}
  before: false
tracking:
  enabled: false
"""
    )


def run_one(a: argparse.Namespace, schedule: str, seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"skyrl-bench-{schedule}-") as tmp:
        folder = Path(tmp)
        project(folder, a, schedule, seed)
        cmd = [str(Path(sys.executable).parent / "skyrl"), "train", "--run-name", schedule]
        if a.ray_address:
            cmd += ["--ray-address", a.ray_address]
        t0, load0 = time.perf_counter(), os.getloadavg()
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode:
            raise SystemExit(f"{schedule} run failed:\n{proc.stdout}\n{proc.stderr}")
        (run,) = (folder / "runs").glob(f"{schedule}-*")
        # "\n" only: a rollout's text may hold U+2028 and the like (ensure_ascii=False)
        lines = lambda p: [json.loads(x) for x in p.read_text().split("\n") if x.strip()]  # noqa: E731
        metrics = lines(run / "metrics.jsonl")
        trained = 0
        by_version: dict[int, list[float]] = {}  # the newest weights that sampled a sample
        for step in range(1, a.steps + 1):
            for r in lines(run / "rollouts" / f"step-{step:06d}.jsonl"):
                trained += r["error"] is None and r["response_len"] > 0 and not r.get("dropped")
                v = max(r["token_versions"], default=step - 1)
                by_version.setdefault(v, []).append(r["reward"])
        seconds = sum(m["time/step"] for m in metrics)
        after = run / "eval" / "after.json"
        sampled = sampled_reward(a, folder, run) if a.eval_samples else None
        out = {
            "schedule": schedule,
            "seed": seed,
            "trained_samples": trained,
            "step_seconds": seconds,
            "wall_seconds": wall,
            "samples_per_s": trained / seconds,
            "reward": [m["reward/mean"] for m in metrics],
            "reward_by_version": {
                v: (sum(x) / len(x), len(x)) for v, x in sorted(by_version.items())
            },
            "eval_after": json.loads(after.read_text())["mean_reward"] if after.exists() else None,
            "eval_sampled": sampled,
            "load": [load0, os.getloadavg()],
        }
        if schedule == "async":
            mean = lambda k: sum(m[k] for m in metrics) / len(metrics)  # noqa: E731
            out |= {k: mean(k) for k in ("perf/engine_idle", "perf/learner_idle", "staleness/mean")}
            weighted = [m for m in metrics if "async/behaviour_weight" in m]  # decoupled PPO's
            out["behaviour_weight"] = [m["async/behaviour_weight"] for m in weighted]
            out["behaviour_capped"] = [m["async/behaviour_capped"] for m in weighted]
        return out


def sampled_reward(a: argparse.Namespace, folder: Path, run: Path) -> float:
    """The final policy's mean reward over `--eval-samples` samples of each of the `--eval`
    tasks at the training temperature (1.0), environment delay off: what the policy after
    the same number of trained samples earns, with no staleness in it on either side."""
    out = folder / "sampled-eval"
    cmd = [str(Path(sys.executable).parent / "skyrl"), "eval", "--model", str(run)]
    cmd += ["--n-samples", str(a.eval_samples), "--temperature", "1.0", "--limit", str(a.eval)]
    cmd += ["--set", "env.kwargs.delay_s=0", "--output", str(out)]
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"sampled eval of {run.name} failed:\n{proc.stdout}\n{proc.stderr}")
    return float(json.loads((out / "report.json").read_text())["mean_reward"])


def aligned(runs: dict[str, dict], min_samples: int) -> tuple[list[int], dict[str, float]]:
    """The last 5 policy versions both schedules sampled at least `min_samples` samples
    with, and each schedule's mean reward over them: the reward of the policy after the
    same number of trained samples (32 a version here)."""
    ok = [
        set(int(v) for v, (_, n) in r["reward_by_version"].items() if n >= min_samples)
        for r in runs.values()
    ]
    versions = sorted(set.intersection(*ok))[-5:]
    mean = lambda r: sum(r["reward_by_version"][str(v)][0] for v in versions) / len(versions)  # noqa: E731
    return versions, {k: mean(r) for k, r in runs.items()}


def summary(results: list[dict], a: argparse.Namespace) -> None:
    mean5 = lambda xs: sum(xs) / len(xs)  # noqa: E731
    print("\nreward/mean per step, seed by seed:")
    for seed in a.seeds:
        runs = {r["schedule"]: r for r in results if r["seed"] == seed}
        runs = {k: json.loads(json.dumps(r)) for k, r in runs.items()}  # version keys as str
        for i in range(a.steps):
            row = " | ".join(f"{r['reward'][i]:.3f}" for r in runs.values())
            print(f"  seed {seed} step {i + 1:3d} ({' | '.join(runs)}): {row}")
        for k, r in runs.items():
            print(
                f"seed {seed} {k:5s}: {r['samples_per_s']:.2f} samples/s; reward/mean first 5 "
                f"{mean5(r['reward'][:5]):.3f} -> last 5 {mean5(r['reward'][-5:]):.3f}; "
                f"greedy eval after {r['eval_after']}; sampled eval after {r['eval_sampled']}; "
                f"load {r['load']}"
            )
        if len(runs) == 2:
            versions, by = aligned(runs, a.group)
            print(
                f"seed {seed}: speed-up "
                f"{runs['async']['samples_per_s'] / runs['sync']['samples_per_s']:.2f}x; "
                f"reward of policy versions {versions}: sync {by['sync']:.3f}, "
                f"async {by['async']:.3f}"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--delay", type=float, default=1.0, help="median env step delay, seconds")
    p.add_argument("--sigma", type=float, default=0.6, help="log-normal shape of the delay")
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--batch", type=int, default=4, help="tasks a step (P)")
    p.add_argument("--group", type=int, default=8, help="samples a task (G)")
    p.add_argument("--staleness", type=int, default=2, help="async.max_staleness")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--schedules", nargs="+", default=["sync", "async"], choices=["sync", "async"])
    p.add_argument("--eval", type=int, default=16, help="tasks scored greedily after training")
    p.add_argument(
        "--eval-samples",
        type=int,
        default=32,
        help="samples a task of the final policy's sampled eval (0: skip it)",
    )
    p.add_argument("--ray-address", default=None, help="join a cluster (default: private)")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    a = p.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    results = []
    for seed in a.seeds:
        for schedule in a.schedules:
            r = run_one(a, schedule, seed)
            results.append(r)
            if a.out:  # after every run: a crash later keeps what was measured
                a.out.write_text(
                    json.dumps({"args": vars(a) | {"out": str(a.out)}, "runs": results})
                )
            print(
                f"seed {seed} {schedule:5s}: {r['trained_samples']} samples in "
                f"{r['step_seconds']:.1f} s of steps = {r['samples_per_s']:.2f} samples/s",
                flush=True,
            )
    summary(results, a)
    if a.out:
        a.out.write_text(json.dumps({"args": vars(a) | {"out": str(a.out)}, "runs": results}))


if __name__ == "__main__":
    main()
