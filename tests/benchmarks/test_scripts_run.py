"""The benchmark scripts still run against the current code (they are not timed tests:
docs/benchmarks.md holds the figures). One broke silently once when a config key was
renamed; this runs each on the smallest work it accepts and checks its table."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from agents.trajectory import Trajectory, Turn
from tests.conftest import with_tiny

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, home: Path, env: dict[str, str] | None = None) -> str:
    with_tiny(home / ".cache" / "skyrl")
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "MLFLOW_DISABLE_TELEMETRY": "true"}
        | (env or {}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_grpo_step_benchmark_prints_both_sides_and_the_ratio(tmp_path):
    out = _run("benchmarks/grpo_step.py", "--model", "tiny", "--steps", "1", home=tmp_path)
    assert re.search(r"^tiny\s+skyrl\s+[\d.]+\s+8\s+32\.0", out, re.M), out
    assert re.search(r"^tiny\s+trl\s+[\d.]+\s+8\s+32\.0", out, re.M), out
    assert re.search(r"ratio trl/skyrl: [\d.]+x", out), out
    # ours as `skyrl` runs (idle OpenMP threads sleep), TRL with the caller's environment
    ours_env, trl_env = re.findall(r"^env: torch .*OMP_WAIT_POLICY (\w+)$", out, re.M)
    assert (ours_env, trl_env) == ("PASSIVE", "unset"), out


def test_decode_benchmark_times_both_attention_paths_and_finds_the_same_samples(tmp_path):
    args = ["--model", "tiny", "--repeats", "1", "--prompt-tokens", "70", "--new-tokens", "12"]
    out = _run("benchmarks/decode.py", *args, home=tmp_path)
    assert re.search(r"^transformers sdpa \(repeats heads\)\s+[\d.]+  [\d.]+$", out, re.M), out
    assert re.search(r"^skyrl \(heads in place\)\s+[\d.]+  [\d.]+$", out, re.M), out
    assert re.search(r"^ratio sdpa/skyrl: [\d.]+x$", out, re.M), out
    assert "same tokens and log-probs: yes" in out, out


def test_env_step_benchmark_prints_a_median_per_environment(tmp_path):
    out = _run("benchmarks/env_step.py", "--steps", "5", "--env", "sql", home=tmp_path)
    assert re.search(r"^sql\s+5\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\d+$", out, re.M), out


def test_learning_harness_reports_each_seed_and_the_mean_delta_from_real_runs(
    tmp_path, ray_address
):
    """Two real 1-step runs of 2 episodes each (on the session's Ray cluster, as
    `--ray-address` lets a user run the seeds on theirs): the table's rows come from each
    run's own eval reports."""
    runs, png = tmp_path / "runs", tmp_path / "curve.png"
    args = ["--env", "math", "--model", "tiny", "--seeds", "2", "--runs-dir", str(runs)]
    args += ["--set", "trainer.max_steps=1", "--set", "eval.limit=2", "--png", str(png), "--quiet"]
    args += ["--set", "rollout.batch_size=1", "--set", "rollout.group_size=2"]
    args += ["--ray-address", ray_address]
    auth = {k: os.environ[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN") if k in os.environ}
    out = _run("benchmarks/learning.py", *args, home=tmp_path, env=auth)
    rows = {}
    for run in (r for r in runs.iterdir() if not r.name.startswith(".")):
        seed = json.loads((run / "learning-seed.json").read_text())["seed"]
        start = json.loads((run / "eval" / "before.json").read_text())["accuracy"]
        final = json.loads((run / "eval" / "after.json").read_text())["accuracy"]
        rows[seed] = (100 * start, 100 * final)
    assert sorted(rows) == [0, 1], out
    for seed, (start, final) in rows.items():
        line = f"| {seed} | {start:.1f} | {final:.1f} | {final - start:+.1f} |"
        assert line in out, (line, out)
    assert re.search(r"^\| 0 \|.*\| [\d.]+ min \| \d+ s \|$", out, re.M), out  # seed 0's eval timed
    assert "| mean ± std |" in out and "dev tasks: 2 (greedy); seeds: 2" in out, out
    assert png.stat().st_size > 10_000


def _episode(task_id: str, said: list[str], correct: bool) -> dict:
    """One eval trajectory as the trainer writes it (`Trajectory.to_record`)."""
    turns = [Turn("user", "Tables: ...")]
    for text in said:
        turns += [Turn("assistant", text), Turn("user", "rows ...")]
    traj = Trajectory(task_id, 0, turns, reward=1.0 if correct else 0.0, num_turns=len(said))
    traj.info = {"correct": correct}
    return traj.to_record(0)


def test_learning_report_breaks_the_delta_down_by_what_the_environment_reports(tmp_path):
    """`--report` over two finished math runs: a row per difficulty (the math environment's
    `report_by`) with its task count, warm-up and final accuracy and the delta's spread."""
    for seed, final in ((0, {"1": 0.5, "2": 0.0}), (1, {"1": 1.0, "2": 0.25})):
        ev = tmp_path / "runs" / f"math-{seed}" / "eval"
        ev.mkdir(parents=True)
        for name, acc in (("warmup", {"1": 0.5, "2": 0.0}), ("after", final)):
            breakdown = {"difficulty": {d: {"tasks": 4, "pass@1": a} for d, a in acc.items()}}
            report = {"n": 8, "accuracy": sum(acc.values()) / 2, "breakdown": breakdown}
            (ev / f"{name}.json").write_text(json.dumps({**report, "name": name}))
            answer = _episode(f"math-dev-{seed:05d}", ["<answer>4</answer>"], name == "after")
            (ev / f"{name}.jsonl").write_text(json.dumps(answer) + "\n")
        _finish_run(ev.parent, seed)
    out = _run(
        "benchmarks/learning.py",
        "--report",
        str(tmp_path / "runs"),
        "--png",
        str(tmp_path / "curve.png"),
        home=tmp_path,
    )
    assert (
        "| difficulty | tasks | warmup % (mean) | final % (mean) | RL delta (mean ± std) |" in out
    )
    assert "| 1 | 4 | 50.0 | 75.0 | 25.0 ± 35.4 |" in out, out
    assert "| 2 | 4 | 0.0 | 12.5 | 12.5 ± 17.7 |" in out, out
    assert "probes" not in out, out  # an SQL measure: math episodes have no <sql> to count


def test_learning_report_names_each_databases_convention_and_counts_probes(tmp_path):
    """`--report` over two finished SQL runs: the per-database rows carry the convention and
    whether train shows it, and the probe table comes from the eval trajectories."""
    probe, answer = "<sql>SELECT * FROM station LIMIT 3</sql>", "<solution>SELECT 1</solution>"
    for seed in (0, 1):
        ev = tmp_path / "runs" / f"sql-{seed}" / "eval"
        ev.mkdir(parents=True)
        final = [  # seed 0: both weather episodes probe; seed 1: one does
            _episode("sql-weather-0000", [probe, answer], True),
            _episode("sql-weather-0001", [probe, answer] if seed == 0 else [answer], False),
            _episode("sql-bookshop-0000", [answer], True),
            _episode("sql-bookshop-0001", [answer + probe], False),  # after the answer: no probe
        ]
        start = [_episode(e["task_id"], [answer], False) for e in final]
        for name, eps in (("warmup", start), ("after", final)):
            (ev / f"{name}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
            acc = {
                "weather": 0.5 if name == "after" else 0.0,
                "bookshop": 0.5 if name == "after" else 0.0,
            }
            breakdown = {"database": {db: {"tasks": 2} for db in acc}}
            report = {
                "n": 4,
                "accuracy": sum(acc.values()) / 2,
                "by_database": acc,
                "breakdown": breakdown,
            }
            (ev / f"{name}.json").write_text(json.dumps({**report, "name": name}))
        _finish_run(ev.parent, seed)
    png = tmp_path / "curve.png"
    out = _run(
        "benchmarks/learning.py",
        "--report",
        str(tmp_path / "runs"),
        "--png",
        str(png),
        home=tmp_path,
    )
    assert "| 0 | 0.0 | 50.0 | 50.0 (2) | 50.0 (2) |" in out, out  # 1 of 2 probing right
    assert "| 1 | 0.0 | 25.0 | 100.0 (1) | 33.3 (3) |" in out, out
    assert "| mean ± std | 0.0 ± 0.0 | 37.5 ± 17.7 | | |" in out, out
    assert (
        "| weather | singular snake_case, abbreviated columns | no | 2 | 0.0 | 50.0 | 50.0 ± 0.0 | 75.0 |"
        in out
    ), out
    assert "| bookshop | plural snake_case | yes | 2 | 0.0 | 50.0 | 50.0 ± 0.0 | 0.0 |" in out, out


def test_gpu_benchmark_learner_section_runs_fsdp_on_two_cpu_workers(tmp_path):
    """benchmarks/gpu.py's learner section on the CPU (gloo, 2-layer model): the one-process
    learner and FSDP2 on 2 workers, through the real learner group on a private Ray cluster;
    the script exits 1 if FSDP's float32 update is off the one-process one by over 1e-5.
    (ZeRO-2/3 rows too by hand: `--sections learners --smoke`, ~1.5 min; docs/scaling.md.)"""
    args = ["--sections", "learners", "--smoke", "--strategies", "torch", "fsdp"]
    out = _run("benchmarks/gpu.py", *args, home=tmp_path)
    assert re.search(
        r"^\| smoke \| torch \| 1 \| [\d.]+ \| [\d,]+ \| n/a \(CPU\) \| [\d.]+ "
        r"\| reference \| - \|$",
        out,
        re.M,
    ), out
    row = re.search(
        r"^\| smoke \| fsdp \| 2 \| [\d.]+ \| [\d,]+ \| n/a \(CPU\) \| [\d.]+ "
        r"\| ([\d.e+-]+) \| 0\.00% \|$",
        out,
        re.M,
    )
    assert row and float(row[1]) < 1e-5, out


def test_run_cost_benchmark_prints_each_run_and_the_cpu_ratio(tmp_path, ray_address):
    auth = {k: os.environ[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN") if k in os.environ}
    out = _run(
        "benchmarks/run_cost.py", "--runs", "1", "--ray-address", ray_address,
        home=tmp_path, env={**auth, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )  # fmt: skip
    assert re.search(r"^true\s+[\d.]+\s+[\d.]+$", out, re.M), out
    assert re.search(r"^false\s+[\d.]+\s+[\d.]+$", out, re.M), out
    assert re.search(r"^CPU ratio separate/shared: [\d.]+x$", out, re.M), out


def test_run_cost_benchmark_compares_a_fresh_worker_with_a_warm_one(tmp_path, ray_address):
    auth = {k: os.environ[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN") if k in os.environ}
    out = _run(
        "benchmarks/run_cost.py", "--runs", "1", "--ray-address", ray_address,
        "--compare", "warm",
        home=tmp_path, env={**auth, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )  # fmt: skip
    assert re.search(r"^\(first warm\)\s+[\d.]+\s+[\d.]+\s+starts the worker$", out, re.M), out
    assert re.search(r"^fresh\s+[\d.]+\s+[\d.]+$", out, re.M), out
    assert re.search(r"^warm\s+[\d.]+\s+[\d.]+$", out, re.M), out
    assert re.search(r"^CPU ratio fresh/warm: [\d.]+x$", out, re.M), out


def _finish_run(run: Path, seed: int) -> None:
    """What a finished run holds besides its evals: one step's metrics and the seed file."""
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    (run / "learning-seed.json").write_text(json.dumps({"seed": seed, "wall_s": 60.0}))


def _report(tmp_path: Path) -> str:
    """`benchmarks/learning.py --report` over the runs under tmp_path/runs."""
    return _run(
        "benchmarks/learning.py",
        *("--report", str(tmp_path / "runs"), "--png", str(tmp_path / "curve.png")),
        home=tmp_path,
        env={"PYTHONPATH": str(ROOT)},  # this checkout's tasks.sql, whatever is installed
    )


def _write_eval(folder: Path, name: str, episodes: list[dict], by_database: dict) -> None:
    """An eval's report and trajectories, as training (`eval/NAME.json[l]`) or `skyrl eval
    --output` (`NAME/report.json`, `NAME/results.jsonl`) writes them."""
    report = {
        "n": len(episodes),
        "accuracy": sum(by_database.values()) / len(by_database),
        "by_database": by_database,
        "breakdown": {"database": {db: {"tasks": 1} for db in by_database}},
        "split": "transfer-dev" if name in ("warmup", "after") else "transfer-test",
        "name": name,
    }
    lines = "".join(json.dumps(e) + "\n" for e in episodes)
    if name in ("warmup", "after"):
        (folder / f"{name}.json").write_text(json.dumps(report))
        (folder / f"{name}.jsonl").write_text(lines)
    else:
        (folder / name).mkdir()
        (folder / name / "report.json").write_text(json.dumps(report))
        (folder / name / "results.jsonl").write_text(lines)


def test_learning_report_groups_databases_by_convention_on_dev_and_the_test_split(tmp_path):
    """`--report` over two finished `sql_transfer` runs, each with its warm-up and final
    checkpoints scored on transfer-test too (`--test-split`): a row per split and convention
    group (seen in train / unseen), then per database of a group of several, with accuracy,
    RL delta, probe rate and the accuracy with and without probes at both checkpoints."""
    probe, answer = "<sql>SELECT * FROM t_animal LIMIT 3</sql>", "<solution>SELECT 1</solution>"
    for seed in (0, 1):
        ev = tmp_path / "runs" / f"sql-{seed}" / "eval"
        ev.mkdir(parents=True)
        warmup = [
            _episode("sql-bookshop-0000", [answer], True),
            _episode("sql-weather-0000", [answer], False),
            _episode("sql-zoo-0000", [answer], False),
        ]
        after = [  # zoo: seed 0 probes, seed 1 does not; both wrong
            _episode("sql-bookshop-0000", [answer], True),
            _episode("sql-weather-0000", [probe, answer], True),
            _episode("sql-zoo-0000", [probe, answer] if seed == 0 else [answer], False),
        ]
        _write_eval(ev, "warmup", warmup, {"bookshop": 1.0, "weather": 0.0, "zoo": 0.0})
        _write_eval(ev, "after", after, {"bookshop": 1.0, "weather": 1.0, "zoo": 0.0})
        for name, right in (
            ("extra-transfer-test-start", False),
            ("extra-transfer-test-final", True),
        ):
            eps = [
                _episode("sql-league-0000", [probe, answer], right),
                _episode("sql-music-0000", [answer], True),
            ]
            _write_eval(ev, name, eps, {"league": float(right), "music": 1.0})
        _finish_run(ev.parent, seed)
    out = _report(tmp_path)
    for row in (
        "| transfer-dev | seen | bookshop | 1 | 100.0 | 100.0 | 0.0 ± 0.0 | 0.0 / 0.0"
        " | - / 100.0 (2) | - / 100.0 (2) |",
        "| transfer-dev | unseen | weather, zoo | 2 | 0.0 | 50.0 | 50.0 ± 0.0 | 0.0 / 75.0"
        " | - / 0.0 (4) | 66.7 (3) / 0.0 (1) |",
        "| transfer-dev | unseen | weather | 1 | 0.0 | 100.0 | 100.0 ± 0.0 | 0.0 / 100.0"
        " | - / 0.0 (2) | 100.0 (2) / - |",
        "| transfer-dev | unseen | zoo | 1 | 0.0 | 0.0 | 0.0 ± 0.0 | 0.0 / 50.0"
        " | - / 0.0 (2) | 0.0 (1) / 0.0 (1) |",
        "| transfer-test | seen | music | 1 | 100.0 | 100.0 | 0.0 ± 0.0 | 0.0 / 0.0"
        " | - / 100.0 (2) | - / 100.0 (2) |",
        "| transfer-test | unseen | league | 1 | 0.0 | 100.0 | 100.0 ± 0.0 | 100.0 / 100.0"
        " | 0.0 (2) / - | 100.0 (2) / - |",
    ):
        assert row in out, (row, out)
    assert "| zoo | t_ singular tables, type-prefixed columns, pk_/fk_ keys | no | 1 |" in out, out


def test_learning_report_shows_a_checkpoint_it_could_not_score_as_missing_not_zero(tmp_path):
    """A run whose warm-up checkpoint was not there to score on the test split (checkpoint
    rotation had pruned `step-000000`): its warm-up cells and RL delta read "-", and a note
    says why, rather than a 0.0 that turns the final accuracy into an "RL delta"."""
    answer = "<solution>SELECT 1</solution>"
    for seed in (0, 1):
        ev = tmp_path / "runs" / f"sql-{seed}" / "eval"
        ev.mkdir(parents=True)
        eps = [_episode("sql-bookshop-0000", [answer], True)]
        _write_eval(ev, "warmup", eps, {"bookshop": 1.0})
        _write_eval(ev, "after", eps, {"bookshop": 1.0})
        league = [_episode("sql-league-0000", [answer], True)]
        _write_eval(ev, "extra-transfer-test-final", league, {"league": 1.0})
        _finish_run(ev.parent, seed)
    out = _report(tmp_path)
    row = (
        "| transfer-test | unseen | league | 1 | - | 100.0 | - | - / 0.0 | - / - | - / 100.0 (2) |"
    )
    assert row in out, (row, out)
    assert "no warmup score on transfer-test for seeds 0, 1" in out, out


def test_learning_harness_keeps_the_warm_up_checkpoint_when_it_scores_a_test_split():
    """`--test-split` scores `step-000000` after training, so the run it starts must keep
    that checkpoint through rotation (stop 47's seed lost it to `keep_checkpoints: 2`)."""
    from benchmarks import learning

    args = learning.parser().parse_args(["--config", "sql_transfer", "--test-split", "t"])
    cmd = learning.train_command(args, 0, Path("runs"))
    keep = [
        cmd[i + 1] for i, a in enumerate(cmd) if a == "--set" and "keep_checkpoints" in cmd[i + 1]
    ]
    assert keep and int(keep[-1].split("=")[1]) >= 1000, cmd
    plain = learning.train_command(
        learning.parser().parse_args(["--config", "sql_transfer"]), 0, Path("r")
    )
    assert not any("keep_checkpoints" in a for a in plain), plain


def test_learning_report_says_why_each_databases_answers_were_wrong(tmp_path):
    """The final checkpoint's episodes per database, pooled over seeds, by what the SQL
    environment said of the answer (its `info`): right, ran but returned other rows, named a
    table or a column the schema lacks, another SQL error, or no `<solution>` at all."""
    answer = "<solution>SELECT 1</solution>"

    def wrong(task: str, error: str | None, said: str = answer) -> dict:
        rec = _episode(task, [said], False)
        rec["info"] = {"correct": False, "error": error}
        return rec

    for seed in (0, 1):
        ev = tmp_path / "runs" / f"sql-{seed}" / "eval"
        ev.mkdir(parents=True)
        after = [
            _episode("sql-weather-0000", [answer], True),
            wrong("sql-weather-0001", "sqlite error: no such table: warning"),
            wrong("sql-weather-0002", "sqlite error: no such column: temperature"),
            wrong("sql-weather-0003", None),
            wrong("sql-zoo-0000", 'sqlite error: near "FROM": syntax error'),
            wrong("sql-zoo-0001", None, said="I do not know"),
        ]
        _write_eval(ev, "warmup", after, {"weather": 0.25, "zoo": 0.0})
        _write_eval(ev, "after", after, {"weather": 0.25, "zoo": 0.0})
        _finish_run(ev.parent, seed)
    out = _report(tmp_path)
    assert (
        "| split | database | episodes | right | wrong rows | unknown table | unknown column"
        " | other SQL error | no answer |" in out
    ), out
    assert "| transfer-dev | weather | 8 | 2 | 2 | 2 | 2 | 0 | 0 |" in out, out
    assert "| transfer-dev | zoo | 4 | 0 | 0 | 0 | 0 | 2 | 2 |" in out, out


def test_learning_report_splits_the_probe_rate_by_whether_the_question_names_the_answer(
    tmp_path,
):
    """The probe rate on the eval tasks whose question leaves the answer's tables or columns
    unnamed (`probe_when: unsure`'s rule) and on the others, at both checkpoints: whether a
    policy learned when to look. sql-weather-0000/0001 are unsure (`opened_yr`, `alert`),
    sql-airline-0007 is named ("highest price of any booking": MAX(price) FROM bookings)."""
    probe, answer = "<sql>SELECT * FROM station LIMIT 3</sql>", "<solution>SELECT 1</solution>"
    ev = tmp_path / "runs" / "sql-0" / "eval"
    ev.mkdir(parents=True)
    start = [
        _episode(t, [answer], False)
        for t in ("sql-weather-0000", "sql-weather-0001", "sql-airline-0007")
    ]
    final = [
        _episode("sql-weather-0000", [probe, answer], True),
        _episode("sql-weather-0001", [answer], False),
        _episode("sql-airline-0007", [answer], True),
    ]
    _write_eval(ev, "warmup", start, {"weather": 0.0, "airline": 0.0})
    _write_eval(ev, "after", final, {"weather": 0.5, "airline": 1.0})
    _finish_run(ev.parent, 0)
    out = _report(tmp_path)
    assert "| 0 | 0.0 (2) | 0.0 (1) | 50.0 (2) | 0.0 (1) |" in out, out


def test_learning_report_pairs_a_lever_with_the_same_seeds_of_its_recipe(tmp_path):
    """`--report LEVER --against BASE`: seed by seed, both runs' warm-up, final and RL delta
    and the final difference; then per database the mean final accuracy of each side and
    the paired difference's mean ± std. A seed the base lacks is named, not paired."""
    answer = "<solution>SELECT 1</solution>"
    finals = {"base": {0: 0.20, 1: 0.30}, "lever": {0: 0.10, 1: 0.40, 2: 0.5}}
    for side, by_seed in finals.items():
        for seed, acc in by_seed.items():
            ev = tmp_path / side / f"sql-{seed}" / "eval"
            ev.mkdir(parents=True)
            eps = [_episode("sql-weather-0000", [answer], False)]
            _write_eval(ev, "warmup", eps, {"weather": 0.1 * (seed + 1)})
            _write_eval(ev, "after", eps, {"weather": acc})
            _finish_run(ev.parent, seed)
    out = _run(
        "benchmarks/learning.py",
        *("--report", str(tmp_path / "lever"), "--against", str(tmp_path / "base")),
        *("--png", str(tmp_path / "curve.png")),
        home=tmp_path,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert "(no run of seeds 2 in --against)" in out, out
    assert "| 0 | 10.0 / 10.0 | 20.0 / 10.0 | +10.0 / +0.0 | -10.0 |" in out, out
    assert "| 1 | 20.0 / 20.0 | 30.0 / 40.0 | +10.0 / +20.0 | +10.0 |" in out, out
    assert "| mean ± std | | | 10.0 ± 0.0 / 10.0 ± 14.1 | 0.0 ± 14.1 |" in out, out
    assert "| weather | 25.0 | 25.0 | 0.0 ± 14.1 |" in out, out
