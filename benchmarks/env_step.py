"""Per-step latency of every built-in environment: median over N steps of a typical action.

    python benchmarks/env_step.py                 # 1,000 steps per environment
    python benchmarks/env_step.py --steps 200 --env python --env shell

Each environment gets a bundled task and a representative action, repeated; only `step` is
timed (resets are timed separately, once per episode). Episodes are made long with a large
`max_turns` so a step is an action, not an episode boundary (math is one-turn by design, so
each of its steps is a full episode and a reset). Baseline: the model's own decode step,
which on this CPU costs ~20 ms per token for smollm2-135m: an environment step should be a
small fraction of one token.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

ACTIONS = {
    "sql": "<sql>SELECT name, type FROM sqlite_master LIMIT 5</sql>",
    "math": "<answer>42</answer>",
    "search": "<search>river flows into sea</search>",
    "python": "<python>x = sum(range(100)); x</python>",
    "shell": "<bash>ls -la | head -5</bash>",
}


def bench(name: str, steps: int) -> tuple[float, float, float, int]:
    """(median step ms, p90 step ms, median reset ms, episodes) for one environment."""
    from environments import registry

    spec = registry.BUILTINS[name]
    turns = 1 if name == "math" else steps + 1
    env = registry.make_env(spec, max_turns=turns)
    step_s: list[float] = []
    reset_s: list[float] = []
    done = True
    try:
        while len(step_s) < steps:
            if done:
                t0 = time.perf_counter()
                env.reset(seed=len(reset_s))
                reset_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(ACTIONS[name])
            step_s.append(time.perf_counter() - t0)
            done = terminated or truncated
    finally:
        env.close()
    q = statistics.quantiles(step_s, n=10)
    return (
        statistics.median(step_s) * 1e3,
        q[-1] * 1e3,
        statistics.median(reset_s) * 1e3,
        len(reset_s),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--env", action="append", choices=sorted(ACTIONS), default=None)
    args = parser.parse_args()
    os.environ.setdefault("HOME", tempfile.mkdtemp())  # shells write history files
    from environments.sandbox import bwrap_available

    print(f"sandbox: {'bubblewrap' if bwrap_available() else 'fallback (no bubblewrap)'}")
    print(
        f"{'env':<8} {'steps':>6} {'median ms':>10} {'p90 ms':>8} {'reset ms':>9} {'episodes':>9}"
    )
    for name in args.env or list(ACTIONS):
        med, p90, reset, episodes = bench(name, args.steps)
        print(f"{name:<8} {args.steps:>6} {med:>10.2f} {p90:>8.2f} {reset:>9.1f} {episodes:>9}")


if __name__ == "__main__":
    main()
