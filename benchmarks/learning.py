"""Does the RL phase learn? A recipe over S seeds, scored on every dev task, with error bars.

    python benchmarks/learning.py                                  # skyrl train --env sql, 3 seeds
    python benchmarks/learning.py --env math --model smollm2-135m --seeds 3
    python benchmarks/learning.py --config sql_grpo --set trainer.max_steps=20 --eval-every 10
    python benchmarks/learning.py --report runs-learning/sql        # re-read finished runs only
    python benchmarks/learning.py --config sql_transfer --test-split transfer-test

Each seed is one real `skyrl train` (its own run directory under --runs-dir), with the
evaluation widened to the whole split (`eval.limit`), so the warm-up checkpoint (step 0) and
the final one are scored on all dev tasks, greedy. Prints, per seed and as mean ± std, the
warm-up accuracy, the final accuracy and the RL delta between them, the wall time of the run
and of one final evaluation, and the RL delta per database (where the environment reports
one) with the database's naming convention. From the eval trajectories (eval/*.jsonl) it
counts the episodes that ran a `<sql>` probe before answering, and the accuracy of the
episodes with and without one. For SQL it also groups the databases by whether train uses
their naming convention (`tasks.sql.transfer.convention_seen`): accuracy, RL delta, probe
rate and accuracy with and without probes per group, at the warm-up and final checkpoints;
`--test-split transfer-test` scores both checkpoints on that split too (`skyrl eval`), so
the test split's unseen-convention databases are in the table. Per scored split and database
it counts why the final checkpoint's answers were wrong (rows that differ, a table or column
the schema lacks, another SQL error, no answer). Writes a PNG of dev accuracy
and mean reward against step for every seed. Nothing here is asserted: the figures go to docs/learning.md by hand, with the
command that made them. What it reads of a run is `learning_episodes.py`, what it prints
`learning_report.py`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, or imported
from benchmarks.learning_episodes import Checkpoint, Probes, Seed, probes  # noqa: E402
from benchmarks.learning_report import paired_table, plot, table  # noqa: E402

ALL_TASKS = 100_000  # eval.limit wide enough for any bundled split


def _skyrl() -> str:
    return str(Path(sys.executable).with_name("skyrl"))


# `--test-split` scores `step-000000` after training: checkpoint rotation must not prune it
KEEP_ALL = 1000


def train_command(args: argparse.Namespace, seed: int, runs: Path) -> list[str]:
    """The `skyrl train` command line of one seed."""
    cmd = [_skyrl(), "train", "--seed", str(seed), "--runs-dir", str(runs)]
    cmd += ["--env", args.env] if args.env else []
    cmd += ["--config", args.config] if args.config else []
    cmd += ["--model", args.model] if args.model else []
    cmd += ["--ray-address", args.ray_address] if args.ray_address else []
    cmd += ["--set", f"eval.limit={ALL_TASKS}"]
    cmd += ["--set", "eval.before=false"] if args.no_before else []
    cmd += ["--set", f"eval.every={args.eval_every}"] if args.eval_every else []
    cmd += ["--set", f"trainer.keep_checkpoints={KEEP_ALL}"] if args.test_split else []
    for kv in args.set:
        cmd += ["--set", kv]
    return cmd


def train(args: argparse.Namespace, seed: int, runs: Path) -> Seed:
    """One real `skyrl train`; the run directory is the one that appeared under `runs`."""
    before = set(runs.iterdir()) if runs.exists() else set()
    cmd = train_command(args, seed, runs)
    print("$", " ".join(cmd), flush=True)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=sys.stderr if args.quiet else None)
    wall = time.perf_counter() - t
    (run,) = [p for p in runs.iterdir() if p not in before and p.is_dir() and p.name[0] != "."]
    (run / "learning-seed.json").write_text(json.dumps({"seed": seed, "wall_s": wall}))
    return Seed(seed, run, wall)


def read(run: Path) -> Seed:
    """A finished run's reports: the warm-up (or before) and after evals, reward and dev curves."""
    meta = run / "learning-seed.json"
    info: dict[str, Any] = json.loads(meta.read_text()) if meta.exists() else {"seed": -1}
    s = Seed(info["seed"], run, info.get("wall_s"))
    ev = run / "eval"
    first = ev / "warmup.json" if (ev / "warmup.json").exists() else ev / "before.json"
    if not first.exists() or not (ev / "after.json").exists():
        raise SystemExit(f"error: {run} has no warm-up/before and after evaluation")
    s.start = json.loads(first.read_text())
    s.final = json.loads((ev / "after.json").read_text())
    s.start_probes = probes(first.with_suffix(".jsonl"))
    s.final_probes = probes(ev / "after.jsonl")
    s.evals.append((0, s.start["accuracy"]))
    for line in (run / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        if "reward/mean" in m:
            s.curve.append((m["step"], m["reward/mean"]))
        if "eval/accuracy" in m:
            s.evals.append((m["step"], m["eval/accuracy"]))
    s.evals.append((s.final.get("step", s.curve[-1][0] if s.curve else 0), s.final["accuracy"]))
    s.extra = _read_extra(ev)
    return s


def read_all(folder: Path) -> list[Seed]:
    """Every finished run in `folder` (a runs dir, or a folder of links to run dirs)."""
    return [read(d) for d in sorted(folder.iterdir()) if (d / "metrics.jsonl").exists()]


def score_split(s: Seed, split: str) -> None:
    """The warm-up checkpoint (step 0) and the final one scored on another split by
    `skyrl eval` (greedy, every task), into eval/extra-<split>-{start,final}/."""
    models = {"final": s.run}
    if (s.run / "checkpoints" / "step-000000").exists():
        models["start"] = s.run / "checkpoints" / "step-000000"
    else:
        print(f"note: {s.run} kept no step-000000 to score on {split}", file=sys.stderr)
    for name, model in models.items():
        cmd = [_skyrl(), "eval", "--model", str(model), "--split", split]
        cmd += [
            "--limit",
            str(ALL_TASKS),
            "--output",
            str(s.run / "eval" / f"extra-{split}-{name}"),
        ]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=sys.stderr)


def _read_extra(ev: Path) -> dict[str, tuple[Checkpoint, Checkpoint]]:
    out = {}
    for final in sorted(ev.glob("extra-*-final")):
        split = final.name.removeprefix("extra-").removesuffix("-final")
        pair = []
        for folder in (ev / f"extra-{split}-start", final):
            if not (folder / "report.json").exists():
                pair.append(Checkpoint({}, Probes()))
                continue
            report = json.loads((folder / "report.json").read_text())
            pair.append(Checkpoint(report, probes(folder / "results.jsonl")))
        out[split] = (pair[0], pair[1])
    return out


def time_eval(s: Seed) -> None:
    """The final checkpoint scored again by `skyrl eval`: the eval time, and a check that it
    gives the accuracy training recorded."""
    cmd = [_skyrl(), "eval", "--model", str(s.run), "--limit", str(s.final["n"])]
    cmd += ["--output", str(s.run / "eval" / "timed")]
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    s.eval_s = time.perf_counter() - t
    if f"{100 * s.final['accuracy']:.1f}" not in out.stdout:
        print(f"note: skyrl eval of {s.run} disagrees with training's after.json", file=sys.stderr)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--env", default=None, help="environment (default: sql unless --config)")
    p.add_argument("--config", default=None, help="a recipe or YAML file")
    p.add_argument("--model", default=None)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--ray-address", default=None, help="join this Ray cluster (default: private)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], help="a config override, repeatable")
    p.add_argument("--eval-every", type=int, default=0, help="also score dev every N steps")
    p.add_argument("--runs-dir", type=Path, default=None, help="default runs-learning/<name>")
    p.add_argument("--png", type=Path, default=None, help="default docs/learning-<name>.png")
    p.add_argument(
        "--no-before",
        action="store_true",
        help="skip the eval before training (a warm-up recipe is scored after it anyway)",
    )
    p.add_argument("--no-eval-timing", action="store_true", help="skip the timed re-evaluation")
    p.add_argument("--quiet", action="store_true", help="training's output to stderr")
    p.add_argument("--report", type=Path, default=None, help="only read the runs in this folder")
    p.add_argument(
        "--against",
        type=Path,
        default=None,
        help="a folder of finished runs of the same seeds without the change: a paired table",
    )
    p.add_argument(
        "--test-split",
        default=None,
        help="also score the warm-up and final checkpoints on this split (e.g. transfer-test); "
        "the runs then keep every checkpoint (about 1.6 GB each for smollm2-135m)",
    )
    return p


def main() -> None:
    args = parser().parse_args()
    if not args.env and not args.config:
        args.env = "sql"
    name = args.report.name if args.report else args.config or args.env
    if args.report:
        seeds = read_all(args.report)
    else:
        root = args.runs_dir or Path("runs-learning") / Path(name).stem
        seeds = []
        for k in range(args.seeds):
            run = train(args, args.first_seed + k, root).run
            if args.test_split:
                score_split(read(run), args.test_split)
            seeds.append(read(run))
            if not args.no_eval_timing and k == 0:
                time_eval(seeds[-1])
    if not seeds:
        raise SystemExit("error: no finished runs to report")
    print(table(seeds))
    if args.against:
        print(paired_table(read_all(args.against), seeds))
    plot(
        seeds, args.png or Path("docs") / f"learning-{Path(name).stem}.png", f"skyrl train: {name}"
    )


if __name__ == "__main__":
    main()
