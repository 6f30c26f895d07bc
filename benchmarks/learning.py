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
command that made them.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ALL_TASKS = 100_000  # eval.limit wide enough for any bundled split
_PROBE = re.compile(r"<sql>", re.I)


@dataclass
class Probes:
    """One evaluation's episodes split by whether the policy ran a `<sql>` probe before
    its `<solution>` (or before giving up)."""

    n: int = 0
    probed: int = 0
    probed_correct: int = 0
    plain_correct: int = 0
    sql_tagged: int = 0  # episodes that wrote a <sql> or <solution> tag: an SQL environment's
    episodes: list[tuple[str, bool]] = field(default_factory=list)  # (task id, probed)
    outcomes: list[tuple[str, bool, bool]] = field(default_factory=list)  # (id, probed, right)
    kinds: list[tuple[str, str]] = field(default_factory=list)  # (task id, one of KINDS)

    @property
    def rate(self) -> float:
        return 100 * self.probed / max(1, self.n)

    def acc(self, probed: bool) -> tuple[float | None, int]:
        """Accuracy (%) of the episodes with (or without) a probe, and how many there were."""
        k = self.probed if probed else self.n - self.probed
        right = self.probed_correct if probed else self.plain_correct
        return (100 * right / k if k else None), k


KINDS = ("right", "wrong rows", "unknown table", "unknown column", "other SQL error", "no answer")
"""What the SQL environment said of an episode's answer (`failure_kind`)."""
_UNKNOWN = {  # SQLite's, DuckDB's and PostgreSQL's words for a name the schema lacks
    "unknown table": re.compile(
        r"no such table|Table with name .* does not exist|relation .* does not exist"
    ),
    "unknown column": re.compile(
        r"no such column|column .* not found|column .* does not exist", re.I
    ),
}


def failure_kind(said: str, info: dict[str, Any], correct: bool) -> str:
    """One of KINDS for an episode: right; no `<solution>` at all; the answer's SQL error,
    split by whether it named a table or a column the schema lacks; or it ran and returned
    other rows (the environment's `info["error"]` is None)."""
    if correct:
        return "right"
    if "<solution>" not in said:
        return "no answer"
    error = info.get("error")
    if not error:
        return "wrong rows"
    return next((k for k, pat in _UNKNOWN.items() if pat.search(error)), "other SQL error")


def probes(path: Path) -> Probes:
    """Count the probing episodes of an eval's trajectories (`eval/NAME.jsonl`)."""
    p = Probes()
    if not path.exists():
        return p
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        said = "".join(t["text"] for t in rec["turns"] if t["role"] == "assistant")
        probed = bool(_PROBE.search(said.split("<solution>")[0]))
        info = rec.get("info") or {}
        correct = bool(info["correct"]) if "correct" in info else rec["reward"] >= 1.0
        p.n += 1
        p.probed += probed
        p.probed_correct += probed and correct
        p.plain_correct += (not probed) and correct
        p.sql_tagged += probed or "<solution>" in said
        p.episodes.append((rec["task_id"], probed))
        p.outcomes.append((rec["task_id"], probed, correct))
        p.kinds.append((rec["task_id"], failure_kind(said, info, correct)))
    return p


def subset(p: Probes, databases: set[str]) -> Probes:
    """The episodes of some SQL databases only (task ids `sql-<database>-...`)."""
    q = Probes()
    for task, probed, correct in p.outcomes:
        if task.split("-")[1:2] and task.split("-")[1] in databases:
            q.n += 1
            q.probed += probed
            q.probed_correct += probed and correct
            q.plain_correct += (not probed) and correct
            q.sql_tagged += 1
            q.episodes.append((task, probed))
            q.outcomes.append((task, probed, correct))
    return q


def convention(database: str) -> tuple[str, str]:
    """A bundled SQL database's naming convention ("plural snake_case") and whether train
    shows it ("yes", or "no" for a held-out database); ("-", "-") for any other."""
    from tasks import sql
    from tasks.sql import domains, transfer

    if database not in sql.DATABASES and not transfer.is_transfer_database(database):
        return "-", "-"
    shared = domains.load(database.partition(transfer.SEP)[0]).split == "shared"
    return sql.convention(database), "yes" if shared else "no"


def group(database: str) -> str | None:
    """`seen` when train renderings use a bundled database's naming convention, `unseen`
    when none does; None for a database that is not bundled."""
    from tasks import sql
    from tasks.sql import transfer

    if database not in sql.DATABASES and not transfer.is_transfer_database(database):
        return None
    return "seen" if transfer.convention_seen(database) else "unseen"


@dataclass
class Checkpoint:
    """One checkpoint's evaluation on one split: its report and its episodes' probes."""

    report: dict[str, Any]
    probes: Probes


@dataclass
class Seed:
    seed: int
    run: Path
    wall_s: float | None = None
    start: dict[str, Any] = field(default_factory=dict)  # warm-up report (or before)
    final: dict[str, Any] = field(default_factory=dict)
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, reward/mean)
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, dev accuracy)
    eval_s: float | None = None
    start_probes: Probes = field(default_factory=Probes)
    final_probes: Probes = field(default_factory=Probes)
    # another split (`--test-split`) scored at both checkpoints: split -> (start, final)
    extra: dict[str, tuple[Checkpoint, Checkpoint]] = field(default_factory=dict)

    @property
    def delta(self) -> float:
        return 100 * (self.final["accuracy"] - self.start["accuracy"])


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


def _ms(xs: list[float]) -> str:
    return (
        f"{statistics.mean(xs):.1f} ± {statistics.stdev(xs):.1f}" if len(xs) > 1 else f"{xs[0]:.1f}"
    )


def table(seeds: list[Seed]) -> str:
    n, start = seeds[0].final["n"], seeds[0].start.get("name", "warmup")
    rows = [
        f"dev tasks: {n} (greedy); seeds: {len(seeds)}; RL delta = final - {start}",
        "",
        f"| seed | {start} % | final % | RL delta (points) | run wall time | eval time |",
        "|---|---|---|---|---|---|",
    ]
    for s in seeds:
        wall = f"{s.wall_s / 60:.1f} min" if s.wall_s else "-"
        ev = f"{s.eval_s:.0f} s" if s.eval_s else "-"
        rows.append(
            f"| {s.seed} | {100 * s.start['accuracy']:.1f} | {100 * s.final['accuracy']:.1f}"
            f" | {s.delta:+.1f} | {wall} | {ev} |"
        )
    rows.append(
        f"| mean ± std | {_ms([100 * s.start['accuracy'] for s in seeds])}"
        f" | {_ms([100 * s.final['accuracy'] for s in seeds])} | {_ms([s.delta for s in seeds])} | | |"
    )
    rows += probe_table(seeds, start)
    dbs = sorted(set().union(*(s.final.get("by_database", {}) for s in seeds)))
    if dbs:
        rows += [
            "",
            f"| database | convention | in train | tasks | {start} % (mean) | final % (mean)"
            " | RL delta (mean ± std) | probed % (final, mean) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for db in dbs:
            a = [100 * s.start.get("by_database", {}).get(db, 0.0) for s in seeds]
            b = [100 * s.final.get("by_database", {}).get(db, 0.0) for s in seeds]
            d = [y - x for x, y in zip(a, b, strict=True)]
            tasks = seeds[0].final.get("breakdown", {}).get("database", {}).get(db, {})
            rate = [_db_probe_rate(s.final_probes, db) for s in seeds]
            known = [r for r in rate if r is not None]
            rows.append(
                f"| {db} | {' | '.join(convention(db))} | {tasks.get('tasks', '-')}"
                f" | {statistics.mean(a):.1f} | {statistics.mean(b):.1f} | {_ms(d)}"
                f" | {f'{statistics.mean(known):.1f}' if known else '-'} |"
            )
    for key in sorted(set().union(*(s.final.get("breakdown", {}) for s in seeds)) - {"database"}):
        rows += breakdown_table(seeds, key, start)
    rows += group_table(seeds, start)
    rows += kind_table(seeds)
    return "\n".join(rows)


def _extra_splits(seeds: list[Seed]) -> list[str]:
    """The other splits (`--test-split`) any seed was scored on, sorted."""
    return sorted(set().union(*(s.extra for s in seeds)))


def _database(task: str) -> str | None:
    """The bundled SQL database of a task id (`sql-<database>-...`), None for another id."""
    parts = task.split("-")
    return parts[1] if parts[0] == "sql" and len(parts) > 1 else None


def kind_table(seeds: list[Seed]) -> list[str]:
    """Per scored split and database, the final checkpoint's episodes (pooled over seeds) by
    what the environment said of their answer (KINDS); SQL only."""
    splits = [(seeds[0].final.get("split", "dev"), [s.final_probes for s in seeds])]
    for name in _extra_splits(seeds):
        splits.append((name, [s.extra[name][1].probes for s in seeds if name in s.extra]))
    rows: list[str] = []
    for split, ps in splits:
        counts: dict[str, dict[str, int]] = {}
        for task, kind in (k for p in ps for k in p.kinds):
            if (db := _database(task)) is not None and group(db) is not None:
                counts.setdefault(db, dict.fromkeys(KINDS, 0))[kind] += 1
        if counts and not rows:
            rows += [
                "",
                "why answers were wrong: the final checkpoint's episodes (all seeds) by what"
                " the environment said of the answer",
                "",
                f"| split | database | episodes | {' | '.join(KINDS)} |",
                "|---|---|---|" + "---|" * len(KINDS),
            ]
        for db, c in sorted(counts.items()):
            rows.append(
                f"| {split} | {db} | {sum(c.values())} | {' | '.join(str(c[k]) for k in KINDS)} |"
            )
    return rows


def _pool(ps: list[Probes]) -> Probes:
    out = Probes()
    for p in ps:
        out.n, out.probed = out.n + p.n, out.probed + p.probed
        out.probed_correct += p.probed_correct
        out.plain_correct += p.plain_correct
        out.outcomes += p.outcomes
    return out


def _group_acc(report: dict, dbs: list[str]) -> float | None:
    """Accuracy (%) over some databases' tasks, from an eval report's per-database rows;
    None when the report scored none of them (a checkpoint that was not there to score)."""
    acc = report.get("by_database", {})
    weight = {db: _cell(report, "database", db).get("tasks", 1) for db in dbs}
    total = sum(weight[db] for db in dbs if db in acc)
    return 100 * sum(acc[db] * weight[db] for db in dbs if db in acc) / total if total else None


def _mean(xs: list[float | None]) -> str:
    known = [x for x in xs if x is not None]
    return f"{statistics.mean(known):.1f}" if known else "-"


def group_table(seeds: list[Seed], start: str) -> list[str]:
    """SQL databases grouped by whether train uses their naming convention, per scored split
    (the run's eval split, then any `--test-split`): accuracy at both checkpoints (mean over
    seeds), the RL delta, the probe rate and the accuracy of the episodes with and without a
    probe (all seeds' episodes pooled, their count in brackets); each group's databases get
    a row of their own after it."""
    dev = [(s.start, s.final, s.start_probes, s.final_probes) for s in seeds]
    splits = [(seeds[0].final.get("split", "dev"), dev)]
    for name in _extra_splits(seeds):
        pairs = [s.extra[name] for s in seeds if name in s.extra]
        splits.append((name, [(a.report, b.report, a.probes, b.probes) for a, b in pairs]))
    rows: list[str] = []
    for split, per_seed in splits:
        dbs = sorted(set().union(*(f.get("by_database", {}) for _, f, _, _ in per_seed)))
        groups: dict[str, list[str]] = {}
        for db in dbs:
            if (g := group(db)) is not None:
                groups.setdefault(g, []).append(db)
        if not groups:
            continue
        if not rows:
            rows += [
                "",
                "convention groups: `seen` databases are named in a convention train uses, "
                "`unseen` ones in none (accuracy: mean over seeds; probes: episodes pooled)",
                "",
                f"| split | group | databases | tasks | {start} % | final % | RL delta (mean ± std)"
                f" | probed % ({start} / final) | {start} % with / without probes"
                " | final % with / without probes |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
        for g in ("seen", "unseen"):
            mine = groups.get(g, [])
            # the group's row, then one per database when it holds several
            for dbs in [mine, *([[db] for db in mine] if len(mine) > 1 else [])]:
                rows.append(_group_row(split, g, dbs, per_seed))
    for name in _extra_splits(seeds):
        if lost := [str(s.seed) for s in seeds if name in s.extra and not s.extra[name][0].report]:
            rows.append(
                f"\nno {start} score on {name} for seed{'s' * (len(lost) > 1)} {', '.join(lost)}: its checkpoint"
                " (step-000000) was not in the run to score"
            )
    return rows


def _group_row(split: str, g: str, dbs: list[str], per_seed: list[tuple]) -> str:
    a = [_group_acc(st, dbs) for st, _, _, _ in per_seed]
    b = [_group_acc(fi, dbs) for _, fi, _, _ in per_seed]
    d = [y - x for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    tasks = sum(_cell(per_seed[0][1], "database", db).get("tasks", 0) for db in dbs)
    p = _pool([subset(sp, set(dbs)) for _, _, sp, _ in per_seed])
    q = _pool([subset(fp, set(dbs)) for _, _, _, fp in per_seed])
    rate = " / ".join(f"{x.rate:.1f}" if x.n else "-" for x in (p, q))
    return (
        f"| {split} | {g} | {', '.join(dbs)} | {tasks or '-'}"
        f" | {_mean(a)} | {_mean(b)} | {_ms(d) if d else '-'}"
        f" | {rate} | {_pct(p.acc(True))} / {_pct(p.acc(False))}"
        f" | {_pct(q.acc(True))} / {_pct(q.acc(False))} |"
    )


def breakdown_table(seeds: list[Seed], key: str, start: str) -> list[str]:
    """The RL delta per value of a task attribute the environment reports accuracy by
    (`report_by`, such as math's `difficulty`): warm-up and final % (mean over seeds)."""
    values = sorted(set().union(*(s.final.get("breakdown", {}).get(key, {}) for s in seeds)))
    rows = [
        "",
        f"| {key} | tasks | {start} % (mean) | final % (mean) | RL delta (mean ± std) |",
        "|---|---|---|---|---|",
    ]
    for v in values:
        a = [100 * _cell(s.start, key, v).get("pass@1", 0.0) for s in seeds]
        b = [100 * _cell(s.final, key, v).get("pass@1", 0.0) for s in seeds]
        d = [y - x for x, y in zip(a, b, strict=True)]
        tasks = _cell(seeds[0].final, key, v).get("tasks", "-")
        rows.append(
            f"| {v} | {tasks} | {statistics.mean(a):.1f} | {statistics.mean(b):.1f} | {_ms(d)} |"
        )
    return rows


def _cell(report: dict, key: str, value: str) -> dict:
    """An eval report's `breakdown[key][value]` ({"tasks": N, "pass@1": x}), {} if absent."""
    return report.get("breakdown", {}).get(key, {}).get(value, {})


def _pct(x: tuple[float | None, int]) -> str:
    return "-" if x[0] is None else f"{x[0]:.1f} ({x[1]})"


def probe_table(seeds: list[Seed], start: str) -> list[str]:
    """Per seed: the share of eval episodes with a `<sql>` probe before the answer, and the
    final accuracy of the episodes with and without one (their count in brackets)."""
    if not any(s.final_probes.sql_tagged for s in seeds):  # not SQL (math, search): no probes
        return []
    rows = [
        "",
        "probes: eval episodes that ran a <sql> query before their answer",
        "",
        f"| seed | probed % ({start}) | probed % (final) | final % with probes (episodes)"
        " | final % without probes (episodes) |",
        "|---|---|---|---|---|",
    ]
    for s in seeds:
        p, q = s.start_probes, s.final_probes
        rows.append(
            f"| {s.seed} | {p.rate:.1f} | {q.rate:.1f} | {_pct(q.acc(True))} | {_pct(q.acc(False))} |"
        )
    rows.append(
        f"| mean ± std | {_ms([s.start_probes.rate for s in seeds])}"
        f" | {_ms([s.final_probes.rate for s in seeds])} | | |"
    )
    return rows


def _db_probe_rate(p: Probes, db: str) -> float | None:
    """Probe share (%) of one bundled database's episodes (task ids `sql-<db>-NNNN`)."""
    mine = [probed for task, probed in p.episodes if task.startswith(f"sql-{db}-")]
    return 100 * sum(mine) / len(mine) if mine else None


def plot(seeds: list[Seed], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for s in seeds:
        top.plot(*zip(*s.evals, strict=True), marker="o", label=f"seed {s.seed}")
        if s.curve:
            bottom.plot(*zip(*s.curve, strict=True), label=f"seed {s.seed}")
    top.set_ylabel("dev accuracy (greedy)")
    top.set_title(title)
    top.legend()
    bottom.set_ylabel("mean reward (training groups)")
    bottom.set_xlabel("step (0 = after the warm-up)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    print(f"plot: {png}")


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
        runs = sorted(d for d in args.report.iterdir() if (d / "metrics.jsonl").exists())
        seeds = [read(d) for d in runs]
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
    plot(
        seeds, args.png or Path("docs") / f"learning-{Path(name).stem}.png", f"skyrl train: {name}"
    )


if __name__ == "__main__":
    main()
