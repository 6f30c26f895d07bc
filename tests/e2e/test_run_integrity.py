"""Run directory and process integrity with the real `skyrl` command (tiny model, math env):
one training process per run, checkpoints that count, run names that stay inside the runs
dir, broken run files refused, config values checked, and stops that leave nothing behind."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, skyrl

TINY = ["--env", "math", "--model", "tiny", "--set", "rollout.batch_size=2"]
QUICK = [*TINY, "--set", "eval.limit=0", "--set", "tracking.enabled=false"]


def _one_sentence(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert needle in proc.stderr, proc.stderr


def _steps(run: Path) -> list[int]:
    return [json.loads(ln)["step"] for ln in (run / "metrics.jsonl").read_text().splitlines()]


def _train(tmp_path: Path, name: str, ray_address: str, *extra: str) -> Path:
    skyrl("train", *QUICK, "--run-name", name, "--ray-address", ray_address, *extra, cwd=tmp_path)
    (run,) = (tmp_path / "runs").glob(f"{name}-*")
    return run


# -- 11: one training process per run -------------------------------------------------------


def test_two_resumes_of_one_run_never_both_train(tmp_path, ray_address):
    run = _fake_run(tmp_path)  # as `skyrl train --watch` hands a new run to its child
    saved = (run / "config.yaml").read_bytes()
    cmd = [str(BIN / "skyrl"), "train", "--resume", str(run), "--max-steps", "2"]
    cmd += ["--ray-address", ray_address]
    procs = [
        subprocess.Popen(
            cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [
        (p.returncode, e[-1500:]) for p, (_, e) in zip(procs, outs, strict=True)
    ]
    winner, loser = (0, 1) if procs[0].returncode == 0 else (1, 0)
    err = outs[loser][1]
    assert f"is held by another training process (pid {procs[winner].pid})" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert _steps(run) == [1, 2]  # not 1,2,1,2
    assert (run / "config.yaml").read_bytes() == saved  # a resume never rewrites the config
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


# -- 12: checkpoints that count ---------------------------------------------------------------


def test_resume_falls_back_past_incomplete_checkpoints_and_says_which(tmp_path, ray_address):
    from safetensors.torch import load_file, save_file

    from trainers.checkpoint import write_manifest

    base = _train(
        tmp_path,
        "ck",
        ray_address,
        "--max-steps",
        "4",
        "--set",
        "trainer.checkpoint_every=1",
        "--set",
        "trainer.keep_checkpoints=4",
    )
    names = [f"step-{i:06d}" for i in (1, 2, 3, 4)]
    assert sorted(p.name for p in (base / "checkpoints").iterdir()) == names
    broken = tmp_path / "runs" / "broken-copy"
    shutil.copytree(base, broken)
    ckpts = base / "checkpoints"
    # 4: its weights file is gone (this resumed from base weights, "successfully")
    (ckpts / "step-000004" / "model" / "model.safetensors").unlink()
    # 3: every listed file is there, but the weights lack a tensor: the strict load refuses
    weights = ckpts / "step-000003" / "model" / "model.safetensors"
    tensors = load_file(str(weights))
    victim = next(k for k in tensors if "layers.0" in k)
    save_file({k: v for k, v in tensors.items() if k != victim}, str(weights))
    write_manifest(ckpts / "step-000003")
    # 2: no optimizer state (this crashed with a Ray traceback)
    (ckpts / "step-000002" / "optimizer.pt").unlink()

    proc = skyrl(
        "train",
        "--resume",
        str(base),
        "--max-steps",
        "5",
        "--ray-address",
        ray_address,
        cwd=tmp_path,
    )
    err = proc.stderr
    assert "checkpoint step-000004 does not count: model/model.safetensors is missing" in err
    assert (
        f"checkpoint step-000003 does not count: the saved weights lack 1 of the model's tensors ({victim}"
        in err
    )
    assert "checkpoint step-000002 does not count: optimizer.pt is missing" in err
    assert "resumed from step-000001 (step 1)" in err, err
    assert "Traceback" not in err
    assert _steps(base) == [1, 2, 3, 4, 5]
    # the broken checkpoints were redone: complete again
    from trainers.checkpoint import problem

    assert [problem(ckpts / n) for n in (*names[1:], "step-000005")] == [None] * 4

    # when no checkpoint counts, the run is refused, not retrained from base weights
    for name in names:
        (broken / "checkpoints" / name / "rng.pt").unlink()
    (broken / "train.lock").unlink(missing_ok=True)
    proc = skyrl(
        "train",
        "--resume",
        str(broken),
        "--max-steps",
        "5",
        "--ray-address",
        ray_address,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    # refused from the files alone, before a worker loads the model for nothing
    assert "Ray" not in proc.stdout + proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "has no complete checkpoint (step-000004, step-000003, step-000002, step-000001" in last
    assert _steps(broken) == [1, 2, 3, 4]


# -- 13: run names stay inside --runs-dir -----------------------------------------------------


@pytest.mark.parametrize("name", ["../escaped", "ABS", "a/b", "..", ".hidden"])
def test_a_run_name_cannot_leave_the_runs_dir(tmp_path, ray_address, name):
    work = tmp_path / "work"
    work.mkdir()
    if name == "ABS":
        name = str(tmp_path / "abs")
    proc = skyrl(
        "train",
        *QUICK,
        "--max-steps",
        "1",
        "--run-name",
        name,
        "--ray-address",
        ray_address,
        cwd=work,
        check=False,
        timeout=300,
    )
    _one_sentence(proc, "is not a plain name")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert not (work / "runs").exists() or not any((work / "runs").iterdir())


@pytest.mark.parametrize("runs_dir", ["afile/runs", "/proc/skyrl-runs"])
def test_an_unwritable_runs_dir_is_one_sentence(tmp_path, runs_dir):
    (tmp_path / "afile").write_text("")
    proc = skyrl(
        "train",
        *QUICK,
        "--max-steps",
        "1",
        "--runs-dir",
        runs_dir,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )
    _one_sentence(proc, "cannot create the run directory")


# -- 14: broken run files on --resume ---------------------------------------------------------


def _fake_run(tmp_path: Path) -> Path:
    """A run directory as `skyrl train` leaves it before its first step."""
    from trainers.config import build_config, save_config

    run = tmp_path / "runs" / "broken"
    for sub in ("rollouts", "checkpoints", "eval"):
        (run / sub).mkdir(parents=True)
    cfg = build_config(
        [
            {
                "model": {"name": "tiny"},
                "rollout": {"batch_size": 2},
                "eval": {"limit": 0},
                "tracking": {"enabled": False},
            }
        ],
        env_name="math",
    )
    save_config(cfg, run / "config.yaml")
    return run


@pytest.mark.parametrize(
    ("broken", "needle"),
    [
        ({"config.yaml": ""}, "is not a complete saved config"),
        ({"config.yaml": "env:\n  name: math\n"}, "is not a complete saved config"),
        ({"config.yaml": "- a list\n"}, "is not a complete saved config"),
        ({"config.yaml": None}, "config.yaml is not a regular file"),
        ({"status.json": "[1, 2]"}, "status.json is not a JSON object"),
        ({"status.json": "{torn"}, "status.json is not a JSON object"),
        ({"status.json": None}, "status.json is not a regular file"),
        ({"metrics.jsonl": None}, "metrics.jsonl is not a regular file"),
    ],
)
def test_broken_run_files_are_refused_and_never_rewritten(tmp_path, ray_address, broken, needle):
    run = _fake_run(tmp_path)
    for name, content in broken.items():
        path = run / name
        path.unlink(missing_ok=True)
        if content is None:
            path.mkdir()  # a folder where a file belongs
        else:
            path.write_text(content)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    proc = subprocess.Popen(
        [str(BIN / "skyrl"), "train", "--resume", str(run), "--max-steps", "1"]
        + ["--ray-address", ray_address],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert {k: after.get(k) for k in before} == before  # the saved files are untouched
    _one_sentence(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), needle)


# -- 15: config values ------------------------------------------------------------------------

PICKY_ENV = """
import gymnasium as gym

class Picky(gym.Env):
    def __init__(self, max_turns: int = 1, level: int = 1):
        if level < 0:
            raise ValueError(f"level must be at least 0, got {level}")
"""


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["optim.lr=.inf"], "bad value inf for optim.lr: input should be a finite number"),
        (["optim.lr=.nan"], "bad value nan for optim.lr: input should be a finite number"),
        (["optim.betas=[0.9, .inf]"], "optim.betas.1: input should be a finite number"),
        (["algorithm.clip_high=.inf"], "algorithm.clip_high: input should be a finite number"),
        (["rollout.temperature=.nan"], "rollout.temperature: input should be a finite number"),
        (["env.kwargs.format_penalty=-.inf"], "kwargs.format_penalty is -inf"),
        (["rollout.max_new_tokens=4096"], "max_new_tokens (4096) must be below max_total_tokens"),
        (["env.kwargs.nope=1"], "env.kwargs.nope is no parameter of environments.math:MathEnv"),
        (["env.kwargs.max_turns=-3"], "set env.max_turns, not env.kwargs.max_turns"),
        (["env.name=picky", "env.kwargs.level=-1"], "refuses env.kwargs: level must be at least 0"),
    ],
)
def test_bad_config_values_are_refused_before_training(tmp_path, ray_address, sets, needle):
    (tmp_path / "picky.py").write_text(PICKY_ENV)
    (tmp_path / "skyrl.yaml").write_text(
        yaml.safe_dump({"environments": {"picky": "picky.py:Picky"}})
    )
    sets = [x for s in sets for x in ("--set", s)]
    args = ["--model", "tiny", "--set", "eval.limit=0", "--set", "tracking.enabled=false", *sets]
    if "env.name=picky" not in sets:
        args = ["--env", "math", *args]
    proc = skyrl(
        "train",
        *args,
        "--max-steps",
        "1",
        "--ray-address",
        ray_address,
        cwd=tmp_path,
        check=False,
        timeout=300,
    )
    _one_sentence(proc, needle)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# -- 16: a stop at any phase ends every process of the run ------------------------------------


def _proc_table() -> dict[int, tuple[int, str, str]]:
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), fields[19], fields[0])
    return table


def _tree(root: int) -> dict[int, str]:
    """Every live process below root: pid -> start time (a reused pid is not ours)."""
    table = _proc_table()
    out, todo = {}, [p for p, (pp, _, _) in table.items() if pp == root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out[pid] = table[pid][1]
            todo += [p for p, (pp, _, _) in table.items() if pp == pid]
    return out


def _survivors(procs: dict[int, str], wait_s: float) -> dict[int, str]:
    deadline = time.monotonic() + wait_s
    while True:
        table = _proc_table()
        left = {
            p: s for p, s in procs.items() if p in table and table[p][1] == s and table[p][2] != "Z"
        }
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()[:120].decode(errors="replace")
    except OSError:
        return "?"


def _no_survivors(procs: dict[int, str]) -> bool:
    """Whether every process of the snapshot is gone (within 15 s); kills what is left."""
    left = _survivors(procs, 15)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert left == {}, {p: _cmdline(p) for p in left}
    return True


def _stop_during(tmp_path: Path, name: str, extra: list[str], ready, signum=signal.SIGTERM):
    """Start a run on its own private Ray cluster, wait until `ready(run, stderr)`, signal it."""
    log = tmp_path / f"{name}.err"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [str(BIN / "skyrl"), "train", *TINY, "--run-name", name, *extra],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    procs: dict[int, str] = {}
    try:
        deadline = time.time() + 300
        while True:
            runs = list((tmp_path / "runs").glob(f"{name}-*"))
            if runs and ready(runs[0], log.read_text()):
                break
            assert proc.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.1)
        procs = _tree(proc.pid)  # the private Ray cluster, its workers, anything else started
        proc.send_signal(signum)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:  # the test failed: leave nothing running behind it
            procs.update(_tree(proc.pid))
            for pid in [proc.pid, *procs]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()
    return runs[0], rc, log.read_text(), procs


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_the_first_evaluation_stops_everything(tmp_path, signum):
    run, rc, err, procs = _stop_during(
        tmp_path,
        "evalterm",
        ["--max-steps", "2", "--set", "eval.limit=400", "--set", "tracking.enabled=false"],
        lambda run, err: "evaluating on 200 dev tasks" in err,
        signum,
    )
    assert len(procs) >= 3, procs  # gcs, raylet and workers of the private cluster at least
    assert rc == 128 + signum, err[-3000:]
    assert "Traceback" not in err and "Aborted" not in err and "SIGABRT" not in err, err[-3000:]
    assert "stopped; continue with: skyrl train --resume" in err
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "stopped" and status["error"] == f"stopped by {signum.name}", status
    assert not (run / "eval" / "before.json").exists()  # it stopped in the evaluation
    assert _no_survivors(procs)


def test_sigterm_during_training_checkpoints_the_step_and_stops_everything(tmp_path):
    run, rc, err, procs = _stop_during(
        tmp_path,
        "trainterm",
        ["--max-steps", "500", "--set", "eval.limit=0", "--set", "trainer.checkpoint_every=100"],
        lambda run, err: (run / "rollouts" / "step-000002.jsonl").exists(),
    )
    assert len(procs) >= 3, procs
    assert rc == 128 + signal.SIGTERM, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "stopped" and status["error"] == "stopped by SIGTERM", status
    step = status["step"]
    assert step >= 2 and _steps(run) == list(range(1, step + 1))
    assert (run / "checkpoints" / f"step-{step:06d}" / "manifest.json").exists()
    assert _no_survivors(procs)
