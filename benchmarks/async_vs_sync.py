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
evaluation excluded on both sides). The reward curve is reward/mean per step.
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
  limit: 0
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
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode:
            raise SystemExit(f"{schedule} run failed:\n{proc.stdout}\n{proc.stderr}")
        (run,) = (folder / "runs").glob(f"{schedule}-*")
        # "\n" only: a rollout's text may hold U+2028 and the like (ensure_ascii=False)
        lines = lambda p: [json.loads(x) for x in p.read_text().split("\n") if x.strip()]  # noqa: E731
        metrics = lines(run / "metrics.jsonl")
        trained = 0
        for step in range(1, a.steps + 1):
            for r in lines(run / "rollouts" / f"step-{step:06d}.jsonl"):
                trained += r["error"] is None and r["response_len"] > 0 and not r.get("dropped")
        seconds = sum(m["time/step"] for m in metrics)
        out = {
            "schedule": schedule,
            "seed": seed,
            "trained_samples": trained,
            "step_seconds": seconds,
            "wall_seconds": wall,
            "samples_per_s": trained / seconds,
            "reward": [m["reward/mean"] for m in metrics],
        }
        if schedule == "async":
            mean = lambda k: sum(m[k] for m in metrics) / len(metrics)  # noqa: E731
            out |= {k: mean(k) for k in ("perf/engine_idle", "perf/learner_idle", "staleness/mean")}
        return out


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
    p.add_argument("--ray-address", default=None, help="join a cluster (default: private)")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    a = p.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    results = []
    for seed in a.seeds:
        for schedule in ("sync", "async"):
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
    print("\nreward/mean per step (sync | async), seed by seed:")
    for seed in a.seeds:
        s, y = (next(r for r in results if r["seed"] == seed and r["schedule"] == k)
                for k in ("sync", "async"))  # fmt: skip
        for i, (x, z) in enumerate(zip(s["reward"], y["reward"], strict=True)):
            print(f"  seed {seed} step {i + 1:3d}  {x:.3f} | {z:.3f}")
        last = lambda r: sum(r["reward"][-5:]) / 5  # noqa: E731
        print(
            f"seed {seed}: speed-up {y['samples_per_s'] / s['samples_per_s']:.2f}x; "
            f"last-5 mean reward sync {last(s):.3f}, async {last(y):.3f}"
        )
    if a.out:
        a.out.write_text(json.dumps({"args": vars(a) | {"out": str(a.out)}, "runs": results}))


if __name__ == "__main__":
    main()
