"""The real `skyrl` command, end to end: init -> train -> runs, errors, MLflow, on a real local Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import BIN, NO_TRACKING, TINY_MATH, skyrl


def test_help_does_not_import_heavy_modules(tmp_path):
    code = (
        "import sys, time; t = time.perf_counter(); sys.argv = ['skyrl', '--help']\n"
        "from skyrl_cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'ray', 'mlflow', 'transformers', 'vllm') if m in sys.modules]\n"
        "print('HEAVY', heavy, 'SECONDS', time.perf_counter() - t)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("HEAVY")][0]
    assert "HEAVY []" in line, line
    assert "skyrl train --env sql" in out.stdout  # examples are shown


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--env", "nope"], "unknown environment 'nope'; known: math, python, search, shell, sql"),
        (
            ["--model", "nonexistent-model"],
            "unknown model 'nonexistent-model'; use a preset (tiny, smollm2-135m",
        ),
        (
            ["--set", "rollout.nope=3"],
            "unknown config key 'rollout.nope'; accepted keys here: engine, batch_size",
        ),
        (["--set", "rollout.group_size=zero"], "bad value 'zero' for rollout.group_size"),
        (["--set", "rollout.group_size=0"], "rollout.group_size"),
        (["--set", "novalue"], "must look like KEY=VALUE"),
        (["--tasks", "missing.jsonl"], "does not exist"),
        (["--config", "missing.yaml"], "config file missing.yaml does not exist"),
        (["--resume", "not-a-run"], "is not a run directory"),
    ],
)
def test_bad_input_is_one_clear_sentence(tmp_path, args, needle):
    proc = skyrl("train", *args, cwd=tmp_path, check=False, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1


def test_init_then_train_then_runs(tmp_path, ray_address):
    skyrl("init", "my-agent", cwd=tmp_path)
    project = tmp_path / "my-agent"
    text = (project / "skyrl.yaml").read_text()
    assert text.count("#") > 40  # every field carries its comment
    assert yaml.safe_load(text)["environments"] == {"my_env": "my_env.py:UnitsEnv"}
    proc = skyrl(
        *("train", "--max-steps", "2", "--model", "tiny", "--ray-address", ray_address),
        *NO_TRACKING,
        cwd=project,
    )
    assert "finished" in proc.stdout
    (run,) = [p for p in (project / "runs").iterdir() if (p / "config.yaml").exists()]
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["step"] for ln in lines] == [1, 2]
    listing = skyrl("runs", cwd=project).stdout
    assert (
        run.name in listing and "finished" in listing and "my_env" in listing and "2/2" in listing
    )
    again = skyrl("init", "my-agent", cwd=tmp_path, check=False)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_train_writes_the_run_directory_and_mlflow(tmp_path, ray_address):
    proc = skyrl(
        "train",
        *TINY_MATH,
        "--max-steps",
        "3",
        "--run-name",
        "m",
        "--set",
        "trainer.checkpoint_every=2",
        "--set",
        "eval.every=2",
        "--ray-address",
        ray_address,
        cwd=tmp_path,
    )
    assert "accuracy" in proc.stdout
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("m-")]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 3 and status["pid"] > 0
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["env"]["name"] == "math" and cfg["model"]["name"] == "tiny"
    metrics = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for key in ("reward/mean", "loss", "grad_norm", "entropy", "perf/tokens_per_s", "time/step"):
        assert all(key in m for m in metrics), key
    rollouts = [
        json.loads(ln) for ln in (run / "rollouts" / "step-000002.jsonl").read_text().splitlines()
    ]
    assert len(rollouts) == 2 * 4  # batch_size x group_size
    r = rollouts[0]
    assert len(r["token_ids"]) == len(r["loss_mask"]) == len(r["logprobs"])
    assert r["loss_mask"][: r["prompt_len"]] == [0] * r["prompt_len"] and sum(r["loss_mask"]) > 0
    # checkpoints: every 2 steps and the last, keep 2 -> step 2 and step 3, complete
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert ckpts == ["step-000002", "step-000003"]
    for c in ckpts:
        d = run / "checkpoints" / c
        assert (d / "model" / "config.json").exists() and (d / "optimizer.pt").exists()
        assert json.loads((d / "trainer_state.json").read_text())["step"] == int(c[-6:])
    assert json.loads((run / "eval" / "after.json").read_text())["n"] == 4
    # eval.every=2: step 2 is scored in-between (step 3, the last, is the "after" eval)
    assert json.loads((run / "eval" / "step-000002.json").read_text())["step"] == 2
    assert "eval/accuracy" in metrics[1] and "eval/accuracy" not in metrics[0]
    assert sorted(p.name for p in (run / "eval").glob("*.json")) == [
        "after.json",
        "before.json",
        "step-000002.json",
    ]
    summary = skyrl("watch", "--once", str(run), cwd=tmp_path).stdout
    assert "finished" in summary and "3/3" in summary and "reward" in summary

    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'runs' / '.mlflow' / 'mlflow.db'}")
    found = mlflow.search_runs(experiment_names=["skyrl"], filter_string=f"run_name = '{run.name}'")
    assert len(found) == 1
    row = found.iloc[0]
    assert row["params.env.name"] == "math" and row["metrics.reward/mean"] == pytest.approx(
        metrics[-1]["reward/mean"]
    )
    client = mlflow.tracking.MlflowClient()
    history = client.get_metric_history(row["run_id"], "loss")
    assert sorted(h.step for h in history) == [1, 2, 3]
    assert any(a.path == "model" for a in client.list_artifacts(row["run_id"]))


def _metrics(run):
    return {m["step"]: m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}


def test_kill_9_then_resume_matches_uninterrupted_run(tmp_path, ray_address):
    """Killed by SIGKILL after step 2's checkpoint, resumed: steps 3 and 4 match a run that
    was never interrupted. The overlong shaping gives the random model's groups different
    rewards, so every step moves the weights and the resumed steps depend on the restored
    weights and Adam moments, not only on the restored sampling state."""
    common = [
        *TINY_MATH,
        "--max-steps",
        "4",
        "--seed",
        "3",
        "--set",
        "algorithm.overlong_buffer=16",
        "--set",
        "trainer.checkpoint_every=2",
        "--set",
        "trainer.threads=1",  # one torch thread a process: no wait on oversubscribed cores
        "--set",
        "eval.before=false",
        "--set",
        "eval.limit=0",
        "--ray-address",
        ray_address,
    ]
    skyrl("train", *common, "--run-name", "full", cwd=tmp_path)
    (full,) = (tmp_path / "runs").glob("full-*")

    proc = subprocess.Popen(
        [str(BIN / "skyrl"), "train", *common, "--run-name", "killed"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while not list((tmp_path / "runs").glob("killed-*/checkpoints/step-000002/trainer_state.json")):
        assert proc.poll() is None and time.time() < deadline, (
            "run ended before step 2's checkpoint"
        )
        time.sleep(0.01)
    proc.kill()  # SIGKILL: no cleanup of any kind
    proc.wait()
    (killed,) = (tmp_path / "runs").glob("killed-*")
    assert not (killed / "checkpoints" / "step-000004").exists(), "killed too late to test resume"
    assert (
        json.loads((killed / "status.json").read_text())["state"] == "running"
    )  # nobody said otherwise
    assert "stale" in skyrl("runs", cwd=tmp_path).stdout  # the pid is gone

    skyrl("train", "--resume", str(killed), "--ray-address", ray_address, cwd=tmp_path)
    a, b = _metrics(full), _metrics(killed)
    assert sorted(b) == [1, 2, 3, 4]
    assert all(a[step]["grad_norm"] > 0 for step in a)  # every step updated the policy
    for step in (3, 4):
        for key in ("loss", "pg_loss", "reward/mean", "grad_norm", "entropy"):
            assert b[step][key] == pytest.approx(a[step][key], abs=1e-5), (step, key)
    assert json.loads((killed / "status.json").read_text())["state"] == "finished"


def test_ctrl_c_finishes_the_step_checkpoints_it_and_resumes(tmp_path, ray_address):
    args = [
        *TINY_MATH,
        "--max-steps",
        "500",
        "--set",
        "trainer.checkpoint_every=100",
        "--set",
        "eval.limit=0",
        "--run-name",
        "intr",
        "--ray-address",
        ray_address,
    ]
    proc = subprocess.Popen(
        [str(BIN / "skyrl"), "train", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while not list((tmp_path / "runs").glob("intr-*/rollouts/step-000002.jsonl")):
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(2)  # SIGINT, as Ctrl-C
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "skyrl train --resume" in err and "Traceback" not in err
    (run,) = (tmp_path / "runs").glob("intr-*")
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "stopped"
    stopped_at = status["step"]
    # the step in flight was finished and checkpointed: nothing is lost
    assert (run / "checkpoints" / f"step-{stopped_at:06d}" / "trainer_state.json").exists()
    assert sorted(_metrics(run)) == list(range(1, stopped_at + 1))
    assert "stopped" in skyrl("runs", cwd=tmp_path).stdout
    skyrl(
        "train",
        "--resume",
        str(run),
        "--max-steps",
        str(stopped_at + 2),
        "--ray-address",
        ray_address,
        cwd=tmp_path,
    )
    assert sorted(_metrics(run)) == list(range(1, stopped_at + 3))


def test_train_watch_trains_in_the_background(tmp_path, ray_address, monkeypatch):
    """`--watch` opens the UI (replaced here: a test has no terminal) and training goes on without it."""
    from typer.testing import CliRunner

    import tui.app
    from skyrl_cli.main import app

    opened = []
    monkeypatch.setattr(tui.app.WatchApp, "run", lambda self, *a, **k: opened.append(self))
    monkeypatch.setattr("trainers.progress.has_terminal", lambda: True)  # as if in one
    monkeypatch.chdir(tmp_path)
    args = [
        "train",
        *TINY_MATH,
        "--max-steps",
        "2",
        "--set",
        "eval.limit=0",
        *NO_TRACKING,
        "--ray-address",
        ray_address,
        "--watch",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(opened) == 1 and "training continues in the background" in result.output
    (run,) = (tmp_path / "runs").glob("math-*")
    deadline = time.time() + 300
    status = run / "status.json"
    while not status.exists() or json.loads(status.read_text()).get("state") != "finished":
        assert time.time() < deadline, (run / "train.log").read_text()
        time.sleep(0.5)
    assert sorted(_metrics(run)) == [1, 2]


def test_sql_project_warms_up_trains_resumes_and_lists(tmp_path, ray_address):
    """`skyrl init --env sql` -> train on the bundled SQLite suite (the sql preset: a
    supervised warm-up, then DAPO) -> resume -> runs, with the tiny model."""
    skyrl("init", "sql-agent", "--env", "sql", cwd=tmp_path)
    project = tmp_path / "sql-agent"
    written = yaml.safe_load((project / "skyrl.yaml").read_text())
    assert written["warmup"]["sft_steps"] > 0 and written["algorithm"]["name"] == "dapo"
    args = [
        *("--model", "tiny", "--run-name", "warm", "--ray-address", ray_address),
        *("--set", "warmup.sft_steps=3", "--set", "warmup.batch_size=4"),
        *("--set", "rollout.batch_size=2", "--set", "rollout.group_size=2"),
        *("--set", "rollout.max_new_tokens=16", "--set", "eval.limit=4"),
        *("--set", "algorithm.kl_coef=0.01"),  # the reference must become the warmed-up policy
        *("--set", "trainer.threads=1"),  # one torch thread a process: no oversubscribed cores
        *NO_TRACKING,
    ]
    first = skyrl("train", *args, "--max-steps", "1", cwd=project)
    assert "warm-up: 3 supervised steps of 4 on 306 reference answers" in first.stderr
    assert "after warm-up" in first.stdout
    (run,) = (project / "runs").glob("warm-*")
    log = (run / "warmup" / "metrics.jsonl").read_text()
    rows = [json.loads(line) for line in log.splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["sft_loss"] > 0 and r["tokens"] > 0 for r in rows)
    assert json.loads((run / "eval" / "warmup.json").read_text())["n"] == 4
    assert (run / "warmup" / "reference" / "config.json").exists()
    # the warm-up is checkpointed as step 0, before RL's first step
    assert (run / "checkpoints" / "step-000000" / "trainer_state.json").exists()
    assert sorted(_metrics(run)) == [1]
    # every episode was graded by the SQLite environment
    rollouts = [
        json.loads(ln) for ln in (run / "rollouts" / "step-000001.jsonl").read_text().splitlines()
    ]
    assert all("correct" in r["info"] for r in rollouts), rollouts
    # DAPO's dynamic sampling: rounds of 2 tasks x 2 samples until 2 groups earn distinct
    # rewards, at most 3 rounds (the tiny model mostly earns one reward: 3 rounds)
    step1 = _metrics(run)[1]
    assert len(rollouts) == step1["episodes"] and step1["episodes"] in (4, 8, 12)
    assert step1["groups/kept"] == 2 or step1["episodes"] == 12

    again = skyrl(
        "train", "--resume", str(run), "--max-steps", "2", "--ray-address", ray_address, cwd=project
    )
    assert "warm-up:" not in again.stderr
    assert (run / "warmup" / "metrics.jsonl").read_text() == log
    assert sorted(_metrics(run)) == [1, 2]
    assert "after warm-up" in again.stdout
    listing = skyrl("runs", cwd=project).stdout
    assert run.name in listing and "finished" in listing and "sql" in listing and "2/2" in listing
