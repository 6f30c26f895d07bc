"""The run-directory reader: states, incremental tailing, torn lines, large runs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tui.reader import RunReader, latest_run, list_runs, run_state
from tui.synthetic import append_metric, make_run, write_rollouts, write_status


def test_list_runs_reads_id_env_model_state(runs_dir: Path) -> None:
    rows = {r.id: r for r in list_runs(runs_dir)}
    assert set(rows) == {
        "math-20261130-100000",
        "sql-20261130-110000",
        "sql-20261130-120000",
    }
    assert rows["math-20261130-100000"].env == "math"
    assert rows["math-20261130-100000"].state == "finished"
    assert rows["sql-20261130-110000"].state == "failed"
    assert rows["sql-20261130-120000"].state == "running"
    assert rows["sql-20261130-120000"].step == 20
    assert rows["sql-20261130-120000"].max_steps == 50
    assert rows["sql-20261130-120000"].model == "tiny"


def test_list_runs_missing_dir_is_empty(tmp_path: Path) -> None:
    assert list_runs(tmp_path / "nope") == []
    assert latest_run(tmp_path / "nope") is None


def test_latest_run_is_newest_by_mtime(runs_dir: Path) -> None:
    old = runs_dir / "math-20261130-100000"
    now = time.time()
    os.utime(old, (now + 100, now + 100))
    assert latest_run(runs_dir) == old


def test_stale_when_heartbeat_old_or_pid_gone() -> None:
    now = time.time()
    alive = os.getpid()
    assert run_state({"state": "running", "heartbeat": now, "pid": alive}) == "running"
    assert run_state({"state": "running", "heartbeat": now - 61, "pid": alive}) == "stale"
    assert run_state({"state": "running", "heartbeat": now, "pid": 2**22 + 12345}) == "stale"
    assert run_state({"state": "finished", "heartbeat": 0}) == "finished"


def test_reader_loads_config_status_metrics_rollouts(run_dir: Path) -> None:
    r = RunReader(run_dir)
    assert r.config["env"]["name"] == "sql"
    assert r.state == "running" and r.step == 20 and r.max_steps == 50
    assert [m["step"] for m in r.metrics] == list(range(1, 21))
    assert len(r.rollouts) == 5 * 16
    assert r.rollouts[0]["step"] == 16 and r.rollouts[-1]["step"] == 20
    assert "token_ids" not in r.rollouts[0]  # per-token arrays are dropped
    elapsed = r.elapsed()
    assert elapsed is not None and elapsed > 0


def test_tail_reads_only_new_bytes_and_waits_for_torn_line(run_dir: Path) -> None:
    r = RunReader(run_dir)
    assert not r.refresh()
    offset = r._metrics_offset
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"step": 21, "reward/mean": 0.9')  # torn: no newline yet
    assert not r.refresh()
    assert r._metrics_offset == offset and r.metrics[-1]["step"] == 20
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write(', "loss": 0.1}\n')
    assert r.refresh()
    assert r.metrics[-1] == {"step": 21, "reward/mean": 0.9, "loss": 0.1}
    assert r._metrics_offset == (run_dir / "metrics.jsonl").stat().st_size


def test_torn_line_from_kill_is_skipped_after_resume(tmp_path: Path) -> None:
    run = make_run(tmp_path, steps=10, torn_tail=True)
    r = RunReader(run)
    assert r.metrics[-1]["step"] == 10
    # The resumed trainer appends after the torn bytes; the garbage line is skipped.
    with (run / "metrics.jsonl").open("a") as f:
        f.write("\n" + json.dumps({"step": 9, "reward/mean": 0.5}) + "\n")
    r.refresh()
    assert [m["step"] for m in r.metrics][-2:] == [8, 9]


def test_truncated_metrics_file_is_reread(run_dir: Path) -> None:
    r = RunReader(run_dir)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "metrics.jsonl").write_text("".join(lines[:3]))
    r.refresh()
    assert [m["step"] for m in r.metrics] == [1, 2, 3]


def test_new_rollout_files_and_status_are_picked_up(run_dir: Path) -> None:
    r = RunReader(run_dir, keep=100)
    assert len(r.rollouts) == 80
    write_rollouts(run_dir, 21, 16)
    append_metric(run_dir, 21)
    write_status(run_dir, step=21)
    assert r.refresh()
    assert r.step == 21 and r.metrics[-1]["step"] == 21
    assert len(r.rollouts) == 96 and r.rollouts[-1]["step"] == 21
    write_rollouts(run_dir, 22, 16)
    r.refresh()
    assert len(r.rollouts) == 100 and r.rollouts[-1]["step"] == 22  # capped at keep


def test_not_a_run_reads_empty(tmp_path: Path) -> None:
    r = RunReader(tmp_path)
    assert r.metrics == [] and len(r.rollouts) == 0 and r.state == "unknown"


def test_open_large_run_is_fast(tmp_path: Path) -> None:
    """10,000 rollouts and 5,000 metric lines; the target is < 2 s, the bound generous."""
    run = make_run(tmp_path, steps=5000, max_steps=5000, rollout_steps=625, per_step=16, tokens=256)
    assert len(os.listdir(run / "rollouts")) == 625
    t0 = time.perf_counter()
    r = RunReader(run)
    elapsed = time.perf_counter() - t0
    print(f"\nopened 10,000-rollout / 5,000-metric run in {elapsed:.3f} s")
    assert len(r.metrics) == 5000 and len(r.rollouts) == 2000
    assert r.rollouts[-1]["step"] == 5000
    assert elapsed < 10


def test_evals_are_read_in_step_order_with_pass_at_k(tmp_path):
    import json

    from tui.reader import eval_line, read_evals

    (tmp_path / "eval").mkdir()
    reports = {
        "after": {"split": "dev", "step": 30, "accuracy": 0.25, "n": 8},
        "before": {"split": "dev", "step": 0, "accuracy": 0.125, "n": 8},
        "dev-step-000030-k4": {
            "split": "dev",
            "step": 30,
            "accuracy": 0.25,
            "n": 32,
            "pass@1": 0.25,
            "pass@2": 0.4,
            "pass@4": 0.5,
        },
        "broken": {"split": "dev"},  # no accuracy: not an evaluation report
    }
    for name, rec in reports.items():
        (tmp_path / "eval" / f"{name}.json").write_text(json.dumps(rec))
    evals = read_evals(tmp_path)
    assert [e["name"] for e in evals][0] == "before" and len(evals) == 3
    assert eval_line(evals[0]) == "dev 12.5% @0"
    k4 = [e for e in evals if e["name"].endswith("k4")][0]
    assert eval_line(k4) == "dev 25.0% @30 (pass@4 50.0%)"
