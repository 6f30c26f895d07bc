"""Where the start-up of `skyrl train` goes: a timestamp on stderr at the end of each stage.

    python benchmarks/startup.py                       # train --env math --model tiny --max-steps 5
    python benchmarks/startup.py --env sql --max-steps 1

Runs the real command in this process with its stages wrapped: `prepare_run`
(config, environment check, run directory), `import trainers.sync` (torch), Ray's start,
`place` (the workers and their model), the tokenizer, the tracking store and each
evaluation. The figures and how to read them: docs/benchmarks.md, "Start-up".
"""

from __future__ import annotations

import sys
import time
from typing import Any

T0 = time.perf_counter()


def mark(label: str) -> None:
    print(f"[{time.perf_counter() - T0:6.2f}] {label}", file=sys.stderr, flush=True)


def wrap(module: Any, name: str) -> None:
    inner = getattr(module, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            mark(f"{name} took {time.perf_counter() - t:.2f}s")

    setattr(module, name, timed)


def main() -> None:
    import skyrl_cli.main as cli
    import skyrl_cli.train as train
    import trainers.launch as launch

    mark("imported skyrl_cli.main")
    wrap(launch, "prepare_run")
    run = train._run

    def timed_run(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        import trainers.placement as placement
        import trainers.sync as sync

        mark(f"import trainers.sync took {time.perf_counter() - t:.2f}s")
        for name in ("place", "ChatFormat", "make_tracker", "run_eval"):
            wrap(sync, name)
        wrap(placement, "start_ray")
        return run(*args, **kwargs)

    train._run = timed_run  # type: ignore[assignment]
    args = sys.argv[1:] or ["--env", "math", "--model", "tiny", "--max-steps", "5"]
    sys.argv = ["skyrl", "train", *args]
    cli.main()


if __name__ == "__main__":
    main()
