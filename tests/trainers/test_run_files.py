"""Run-directory integrity without Ray: the run lock, broken run files, which checkpoints
count and strict weight loading, and ending a process tree (real processes, real files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from agents.models import resolve_model
from trainers.checkpoint import CheckpointError, problem
from trainers.client import learner_spec
from trainers.config import build_config, save_config
from trainers.learner import TorchLearner
from trainers.rundir import RunDir, RunDirError, check_run_name, read_saved_config

HOLD = (
    "import sys, time; from pathlib import Path; from trainers.rundir import RunDir\n"
    "RunDir(Path(sys.argv[1])).hold(); print('held', flush=True); time.sleep(600)\n"
)


def test_one_process_holds_a_run_until_it_dies_even_by_kill_9(tmp_path):
    run = RunDir(tmp_path / "r")
    run.create()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run.path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(
            RunDirError, match=rf"held by another training process \(pid {holder.pid}\)"
        ):
            RunDir(run.path).hold()
    finally:
        holder.kill()  # SIGKILL: the kernel drops the lock, no cleanup needed
        holder.wait()
    again = RunDir(run.path)
    again.hold()  # free now
    assert (run.path / "train.lock").read_text().strip() == str(os.getpid())
    with pytest.raises(RunDirError, match=rf"pid {os.getpid()}"):
        RunDir(run.path).hold()  # a second holder in the same process is refused too
    again.release()
    RunDir(run.path).hold()


@pytest.mark.parametrize(
    "name",
    ["../escaped", "/abs/olute", "a/b", "..", ".", ".hidden", "", "x" * 101, "a\x00b", "a\nb"],
)
def test_a_run_name_is_one_plain_path_component(name):
    with pytest.raises(RunDirError, match="is not a plain name"):
        check_run_name(name)


def test_an_unwritable_runs_dir_is_one_sentence(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(RunDirError, match="cannot create the run directory"):
        RunDir(tmp_path / "file" / "runs" / "r").create()


def _saved(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create()
    save_config(
        build_config([{"model": {"name": "tiny"}}], env_name="math"), run.path / "config.yaml"
    )
    return run


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("config.yaml", "", "not a complete saved config"),
        ("config.yaml", "- 1\n- 2\n", "not a complete saved config"),
        ("config.yaml", "env: {name: math}\n", "not a complete saved config (no model: section)"),
        ("config.yaml", ":\n  - [", "not a complete saved config"),
        ("config.yaml", b"\xff\xfe", "not a complete saved config"),
    ],
)
def test_a_broken_saved_config_is_refused_never_read_as_defaults(tmp_path, name, content, needle):
    run = _saved(tmp_path)
    p = run.path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(RunDirError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        read_saved_config(p)


@pytest.mark.parametrize("content", ["[1, 2]", "{not json", '"running"', "null"])
def test_a_broken_status_is_refused(tmp_path, content):
    run = _saved(tmp_path)
    (run.path / "status.json").write_text(content)
    with pytest.raises(RunDirError, match="is not a JSON object"):
        run.read_status()


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (
            lambda p: (p / "config.yaml").unlink() or (p / "config.yaml").mkdir(),
            "config.yaml is not a regular file",
        ),
        (lambda p: (p / "status.json").mkdir(), "status.json is not a regular file"),
        (lambda p: (p / "metrics.jsonl").mkdir(), "metrics.jsonl is not a regular file"),
        (
            lambda p: (p / "rollouts").rmdir() or (p / "rollouts").write_text(""),
            "rollouts is not a folder",
        ),
    ],
)
def test_run_files_of_the_wrong_kind_are_refused(tmp_path, make, needle):
    run = _saved(tmp_path)
    make(run.path)
    with pytest.raises(RunDirError, match=needle):
        run.check_resumable()


# -- checkpoints ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    return resolve_model("tiny", quiet=True)


@pytest.fixture
def saved(tiny, tmp_path):
    """A learner and a complete checkpoint of it (as RunDir.commit_checkpoint writes one)."""
    learner = TorchLearner(
        tiny, learner_spec(build_config([{"model": {"name": "tiny"}}], env_name="math"))
    )
    run = RunDir(tmp_path / "run")
    run.create()
    tmp = run.checkpoint_tmp(3)
    learner.save_state(tmp)
    (tmp / "rng.pt").write_bytes(b"x")
    ckpt = run.commit_checkpoint(tmp, 3, {"step": 3, "version": 3}, keep=2)
    return learner, run, ckpt


def test_a_checkpoint_counts_only_with_every_listed_file(saved):
    _, run, ckpt = saved
    listed = json.loads((ckpt / "manifest.json").read_text())["files"]
    assert {"model/model.safetensors", "optimizer.pt", "rng.pt", "trainer_state.json"} <= set(
        listed
    )
    assert problem(ckpt) is None and run.list_checkpoints() == [ckpt]
    (ckpt / "optimizer.pt").unlink()
    assert problem(ckpt) == "optimizer.pt is missing"
    assert run.list_checkpoints() == [] and run.checkpoint_dirs() == [ckpt]


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        (
            lambda c: (c / "model" / "model.safetensors").unlink(),
            "model/model.safetensors is missing",
        ),
        (lambda c: (c / "model" / "model.safetensors").write_bytes(b"\0" * 10), "has 10 bytes"),
        (lambda c: (c / "manifest.json").write_text("[]"), "does not list files"),
        (lambda c: (c / "manifest.json").write_text('{"files": {}}'), "lists no model weights"),
        (
            lambda c: (c / "manifest.json").write_text(
                '{"files": {"model/model.safetensors": 1, "../../x": 1}}'
            ),
            "outside the checkpoint",
        ),
        (lambda c: (c / "trainer_state.json").write_text("{}"), None),  # size differs first
    ],
)
def test_a_damaged_checkpoint_does_not_count(saved, damage, needle):
    _, _, ckpt = saved
    damage(ckpt)
    assert problem(ckpt) is not None
    if needle:
        assert needle in problem(ckpt)


def test_a_checkpoint_without_manifest_needs_the_files_every_checkpoint_has(saved):
    _, _, ckpt = saved
    (ckpt / "manifest.json").unlink()
    assert problem(ckpt) is None  # written before manifests existed, and whole
    (ckpt / "rng.pt").unlink()
    assert problem(ckpt) == "rng.pt is missing"


def test_weights_load_strictly_but_for_tied_ones(saved, tiny):
    learner, _, ckpt = saved
    other = TorchLearner(
        tiny, learner_spec(build_config([{"model": {"name": "tiny"}}], env_name="math"))
    )
    with torch.no_grad():
        for p in learner.model.parameters():
            p.add_(0.5)
    weights_file = ckpt / "model" / "model.safetensors"
    tensors = load_file(str(weights_file))
    assert "lm_head.weight" not in tensors  # tied to the embeddings: saved once
    # a checkpoint that lacks a real tensor is refused, and nothing is changed
    victim = next(k for k in tensors if "layers.0" in k)
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    save_file({k: v for k, v in tensors.items() if k != victim}, str(weights_file))
    with pytest.raises(CheckpointError, match=f"lack 1 of the model's tensors \\({victim}"):
        learner.load_state(ckpt)
    assert all(torch.equal(before[k], v) for k, v in learner.model.state_dict().items())
    # a tensor of the wrong shape is refused too
    bad = dict(tensors)
    bad[victim] = torch.zeros(3)
    save_file(bad, str(weights_file))
    with pytest.raises(CheckpointError, match="has shape"):
        learner.load_state(ckpt)
    # the complete file loads, the tied head included
    save_file(tensors, str(weights_file))
    learner.load_state(ckpt)
    assert all(
        torch.equal(v, other.model.state_dict()[k]) for k, v in learner.model.state_dict().items()
    )


# -- ending a process tree ------------------------------------------------------------------

TREE = (
    "import subprocess, sys, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'], start_new_session=True)"
    " for _ in range(2)]\n"
    "grand = subprocess.Popen([sys.executable, '-c', "
    '\'import subprocess, sys, time; subprocess.Popen(["sleep", "600"]); time.sleep(600)\'])\n'
    "print('up', flush=True); time.sleep(600)\n"
)


@pytest.mark.skipif(sys.platform != "linux", reason="the process walk reads /proc")
def test_end_processes_ends_every_descendant_even_those_ignoring_sigterm():
    code = (
        "import subprocess, sys, time\n"
        f"tree = subprocess.Popen([sys.executable, '-c', {TREE!r}], stdout=subprocess.PIPE, text=True)\n"
        "assert tree.stdout.readline().strip() == 'up'\n"
        "time.sleep(0.5)\n"
        "from trainers.stopping import descendants, end_processes\n"
        "import os; before = descendants(os.getpid()); print(' '.join(map(str, before)), flush=True)\n"
        "end_processes(grace_s=1.0)\n"
        "print('left', len(descendants(os.getpid())), flush=True)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    pids = [int(p) for p in proc.stdout.splitlines()[0].split()]
    assert len(pids) >= 5, proc.stdout  # tree, 2 stubborn kids, grand, sleep
    assert proc.stdout.splitlines()[-1] == "left 0"
    for pid in pids:
        assert not _alive(pid), pid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_default_run_name_from_any_env_name_is_a_plain_folder_name(tmp_path):
    from trainers.rundir import new_run_id, run_stem

    for env, stem in [
        ("sql", "sql"),
        ("skyrl_gym:gsm8k", "skyrl_gym-gsm8k"),
        ("verifiers:my.module", "verifiers-my.module"),
        ("../../x:Y", "x-Y"),
        (":::", "run"),
    ]:
        assert run_stem(env) == stem
        assert new_run_id(run_stem(env), tmp_path).startswith(stem + "-")
