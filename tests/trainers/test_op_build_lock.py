"""A run killed during DeepSpeed's first op build does not wedge the next (issue 37, item 11).

torch builds an extension under `<TORCH_EXTENSIONS_DIR>/<op>/lock`, a file created with
O_EXCL that the builder keeps open and removes when done; a builder killed there leaves it,
and every later build waits on it forever. Here a real process takes the lock the way torch
does and is killed (a real dead pid), then the next "run" goes through torch's own
acquire-or-wait step, in a subprocess with a timeout, as a learner worker would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HOLD = """
import sys, time
from torch.utils.file_baton import FileBaton
assert FileBaton(sys.argv[1]).try_acquire()
print("held", flush=True)
time.sleep(600)
"""

# What torch.utils.cpp_extension._jit_compile does around a build, after the guard a learner
# worker installs before DeepSpeed loads its op.
NEXT_RUN = """
import sys
from torch.utils import cpp_extension
from trainers.op_build import guard_op_builds

guard_op_builds(sys.argv[1], report_every_s=float(sys.argv[3]))
baton = cpp_extension.FileBaton(sys.argv[2])
if baton.try_acquire():
    print("built", flush=True)
    baton.release()
else:
    baton.wait()
    print("waited", flush=True)
"""


def _holder(lock: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _next_run(root: Path, lock: Path, report_every_s: float = 60.0) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_EXTENSIONS_DIR": str(root)}
    return subprocess.Popen(
        [sys.executable, "-c", NEXT_RUN, str(root), str(lock), str(report_every_s)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_lock_left_by_a_killed_build_is_taken_over(tmp_path):
    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir()
    holder = _holder(lock)
    holder.send_signal(signal.SIGKILL)  # killed mid-build: the lock stays
    holder.wait()
    assert lock.exists()
    run = _next_run(tmp_path, lock)
    try:
        out, err = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        run.kill()
        raise AssertionError("the next run waited on a dead build's lock") from None
    assert run.returncode == 0 and out.strip() == "built", err[-2000:]
    assert "deepspeed_shm_comm" in err  # it says which stale lock it took over
    assert not lock.exists()


def test_a_live_build_is_waited_for_and_the_wait_is_reported(tmp_path):
    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir()
    holder = _holder(lock)
    run = _next_run(tmp_path, lock, report_every_s=0.5)
    assert run.stderr is not None
    try:
        # a live build is not taken over: the run waits, and says where and how long
        said = run.stderr.readline()  # blocks until the first report (torch imports first)
        assert f"waiting for the op build in {lock.parent}" in said, said
        assert " s so far" in said and lock.exists() and run.poll() is None
    finally:
        holder.kill()  # the builder dies mid-build
        holder.wait()
    try:
        out, err = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        run.kill()
        raise AssertionError("the wait went on after the builder was gone") from None
    # the wait noticed, cleared the lock and stopped with the reason; the next run builds
    assert run.returncode != 0 and "start the run again" in err, err[-2000:]
    assert not lock.exists()
