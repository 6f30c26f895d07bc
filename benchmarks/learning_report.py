"""The tables and the plot `benchmarks/learning.py` prints of its seeds: accuracy and RL
delta per seed and as mean ± std, per database and convention group, the probe rate and the
accuracy with and without a probe, and why the final answers were wrong."""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.learning_episodes import (
    KINDS,
    Probes,
    Seed,
    convention,
    group,
    subset,
)


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
    rows += unsure_table(seeds, start)
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


def paired_table(base: list[Seed], lever: list[Seed]) -> str:
    """A lever against its recipe, seed by seed (`--against`): the same seed gives the same
    warm-up checkpoint, so the final accuracy's difference is the RL phase's change alone.
    Per seed both runs' warm-up, final and RL delta; then per database the mean final
    accuracy of each side and the mean ± std of the paired difference."""
    by_seed = {s.seed: s for s in base}
    pairs = [(by_seed[s.seed], s) for s in lever if s.seed in by_seed]
    missing = sorted(s.seed for s in lever if s.seed not in by_seed)
    rows = [
        "",
        "paired with the runs of --against (the same seeds without the change): base / lever",
        "",
        "| seed | warm-up % | final % | RL delta (points) | final difference (points) |",
        "|---|---|---|---|---|",
    ]
    if missing:
        rows.insert(1, f"(no run of seeds {', '.join(map(str, missing))} in --against)")
    diffs = []
    for b, v in pairs:
        diff = 100 * (v.final["accuracy"] - b.final["accuracy"])
        diffs.append(diff)
        rows.append(
            f"| {v.seed} | {100 * b.start['accuracy']:.1f} / {100 * v.start['accuracy']:.1f}"
            f" | {100 * b.final['accuracy']:.1f} / {100 * v.final['accuracy']:.1f}"
            f" | {b.delta:+.1f} / {v.delta:+.1f} | {diff:+.1f} |"
        )
    if not pairs:
        return "\n".join(rows)
    rows.append(
        f"| mean ± std | | | {_ms([b.delta for b, _ in pairs])} / {_ms([v.delta for _, v in pairs])}"
        f" | {_ms(diffs)} |"
    )
    dbs = sorted(set().union(*(v.final.get("by_database", {}) for _, v in pairs)))
    if dbs:
        rows += [
            "",
            "| database | final % base (mean) | final % lever (mean) | difference (mean ± std) |",
            "|---|---|---|---|",
        ]
        for db in dbs:
            a = [100 * b.final.get("by_database", {}).get(db, 0.0) for b, _ in pairs]
            c = [100 * v.final.get("by_database", {}).get(db, 0.0) for _, v in pairs]
            d = [y - x for x, y in zip(a, c, strict=True)]
            rows.append(
                f"| {db} | {statistics.mean(a):.1f} | {statistics.mean(c):.1f} | {_ms(d)} |"
            )
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


def unsure_table(seeds: list[Seed], start: str) -> list[str]:
    """Per seed, at both checkpoints: the probe rate on the eval tasks whose question does
    not name a table or column of the gold query (`probe_when: unsure`'s rule,
    environments/sql_probes.py) and on the others. A policy that learned when to look
    probes more on the first; one that probes always or never has the same rate on both."""
    if not any(s.final_probes.sql_tagged for s in seeds):
        return []
    unsure = _unsure_tasks(str(seeds[0].final.get("split", "dev")))
    if not unsure:
        return []
    rows = [
        "",
        "probes where the question does not name the answer's tables or columns (unsure) and"
        " where it does (named); eval episodes in brackets",
        "",
        f"| seed | probed % unsure ({start}) | probed % named ({start}) | probed % unsure (final)"
        " | probed % named (final) |",
        "|---|---|---|---|---|",
    ]
    for s in seeds:
        cells = []
        for p in (s.start_probes, s.final_probes):
            for want in (True, False):
                mine = [probed for task, probed in p.episodes if unsure.get(task) is want]
                cells.append(f"{100 * sum(mine) / len(mine):.1f} ({len(mine)})" if mine else "-")
        rows.append(f"| {s.seed} | " + " | ".join(cells) + " |")
    return rows


def _unsure_tasks(split: str) -> dict[str, bool]:
    """Task id -> unsure, for a bundled SQL split ({} for any other split)."""
    from environments.sql_probes import tables_to_probe
    from tasks.sql import load_suite

    try:
        tasks = load_suite(split)
    except ValueError:
        return {}
    return {
        t.id: bool(tables_to_probe(t.answer, str(t.prompt), "unsure"))
        for t in tasks
        if isinstance(t.answer, str)
    }


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
