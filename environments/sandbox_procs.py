"""A sandbox's processes: finding them (by uid, by parent, by what they write to) and
killing them so that none is left and no zombie stays (`kill_tree`, `kill_uid`), and
`SandboxState`, what a sandbox's cleanup needs, kept apart from the `Sandbox` so that its
finalizer can hold it (environments/sandbox.py explains the process layout)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments.sandbox_quota import remove_cgroup, unmount


def all_pids() -> list[str]:
    return [entry for entry in os.listdir("/proc") if entry.isdigit()]


def processes_of_uid(uid: int) -> list[tuple[int, int, str]]:
    """(pid, parent pid, state letter) of every process owned by `uid`, zombies included."""
    return processes(lambda owner: owner == uid)


def processes(owned: Callable[[int], bool]) -> list[tuple[int, int, str]]:
    """(pid, parent pid, state letter) of every process whose uid is `owned`."""
    found = []
    for pid in all_pids():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if owned(os.stat(f"/proc/{pid}").st_uid):
                with open(f"/proc/{pid}/stat") as f:  # "pid (comm) state ppid ..."
                    fields = f.read().rsplit(")", 1)[1].split()
                found.append((int(pid), int(fields[1]), fields[0]))
    return found


def wait_asleep(owned: Callable[[int], bool], cap_s: float, quiet_s: float = 0.2) -> bool:
    """Wait until every process whose uid is `owned` has been asleep (no state R or D) for
    `quiet_s`, at most `cap_s`: what an ENTRYPOINT started in the background (a server
    importing its modules, then waiting in accept()) is ready, as it is in a container by
    the time Harbor's agent runs. False when the cap ran out."""
    deadline = time.monotonic() + cap_s
    quiet_since: float | None = None
    while (now := time.monotonic()) < deadline:
        if any(state in "RD" for _, _, state in processes(owned)):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= quiet_s:
            return True
        time.sleep(0.02)
    return False


def pids_of_uid(uid: int, *, zombies: bool = True) -> list[int]:
    """Pids of the processes owned by `uid` (with or without zombies)."""
    return [pid for pid, _, state in processes_of_uid(uid) if zombies or state != "Z"]


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: a child drops to it and calls kill(-1)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only makes syscalls, then exits
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


@dataclass
class SandboxState:
    """What cleanup needs, kept apart from the Sandbox so a finalizer can hold it."""

    uid: int | None
    lock_fd: int | None
    workdir: Path
    remove_workdir: bool
    bwrap: bool
    cgroup: Path | None = None
    mounted: bool = False
    procs: list[Any] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    netns: subprocess.Popen | None = None
    """The holder of the sandbox's own network namespace (`Sandbox.own_network`)."""
    block: range | None = None
    """Host uids 1..65535 of the sandbox's own user namespace map to (`Sandbox.own_users`)."""
    block_fd: int | None = None
    userns_fd: int | None = None
    """An fd on the sandbox's own user namespace, which lives as long as it is open."""
    pids: subprocess.Popen | None = None
    """The holder of the sandbox's PID namespace (`Sandbox.share_pids`): a bwrap whose pid 1
    (`pids_init`) is that namespace's init; it dies with kill_all, a later command makes one."""
    pids_init: int | None = None
    pids_fd: int | None = None
    """An fd on that PID namespace, for bwrap's `--pidns`."""

    def owns(self, uid: int) -> bool:
        """True for a host uid the sandbox's processes may run as: its own, or its block's."""
        return uid == (os.getuid() if self.uid is None else self.uid) or (
            self.block is not None and uid in self.block
        )

    def kill_all(self) -> None:
        with self.lock:
            procs, self.procs = self.procs, []
        for proc in procs:
            kill_tree(proc, self.owns, self.bwrap, self.pids_init)
        self.drop_pids()  # before the sweep, which would leave its init to the host's pid 1
        if self.uid is not None:
            # anything left (a fallback process that left its session) dies by uid; one of
            # the block's uids (a process that left its PID namespace's reach) by pid
            for _ in range(100):
                left = [p for p, _, state in processes(self.owns) if state != "Z"]
                if not left:
                    break
                kill_uid(self.uid)
                for pid in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.005)

    def drop_pids(self) -> None:
        """End the sandbox's PID namespace, and so every process in it: its init first, which
        the holder reaps (as `kill_tree`), then the holder."""
        if self.pids is not None:
            if self.pids.poll() is None and self.pids_init is not None:  # alive while it is
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pids_init, signal.SIGKILL)
            if not exited(self.pids, 1.0):
                with contextlib.suppress(ProcessLookupError):
                    self.pids.kill()
                self.pids.wait()
        if self.pids_fd is not None:
            os.close(self.pids_fd)
        self.pids, self.pids_init, self.pids_fd = None, None, None

    def close(self) -> None:
        if self.closed:
            return
        self.kill_all()
        self.closed = True
        if self.netns is not None:
            self.netns.kill()
            self.netns.wait()
        for fd in (self.userns_fd, self.block_fd):
            if fd is not None:
                os.close(fd)
        self.userns_fd = self.block_fd = None
        if self.mounted:
            unmount(self.workdir)
        if self.cgroup is not None:
            remove_cgroup(self.cgroup)
        if self.remove_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def exited(proc: Any, timeout: float) -> bool:
    """Wait up to `timeout` for a tracked process (Popen or pexpect.spawn) to exit; reap it."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(subprocess.TimeoutExpired):
        while time.monotonic() <= deadline:
            if isinstance(proc, subprocess.Popen):
                return proc.wait(timeout=max(0.0, deadline - time.monotonic())) is not None
            if not proc.isalive():  # pexpect's isalive() reaps
                return True
            time.sleep(0.002)
    return False


def outputs_of(proc: Any) -> set[tuple[int, int]]:
    """(device, inode) of a tracked process's stdout and stderr (our ends of its pipes, or
    its terminal), which the init of its own PID namespace keeps; /dev/null left out."""
    found = set()
    for number, stream in ((1, getattr(proc, "stdout", None)), (2, getattr(proc, "stderr", None))):
        with contextlib.suppress(OSError, ValueError):
            if isinstance(proc, subprocess.Popen):
                if stream is None or stream.closed:
                    continue
                st = os.fstat(stream.fileno())
            else:
                st = os.stat(f"/proc/{proc.pid}/fd/{number}")
            if not (stat.S_ISCHR(st.st_mode) and st.st_rdev == os.stat("/dev/null").st_rdev):
                found.add((st.st_dev, st.st_ino))
    return found


def writing_to(
    outputs: set[tuple[int, int]], owned: Callable[[int], bool], parent: int | None = None
) -> list[int]:
    """The sandbox's live processes (children of `parent`, if given) whose stdout or stderr
    is one of `outputs`."""
    found = []
    for pid, ppid, state in processes(owned) if outputs else []:
        if state == "Z" or (parent is not None and ppid != parent):
            continue
        for number in (1, 2):
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{pid}/fd/{number}")
                if (st.st_dev, st.st_ino) in outputs:
                    found.append(pid)
                    break
    return found


def inner_roots(
    proc: Any, owned: Callable[[int], bool], bwrap: bool, adopter: int | None
) -> list[int]:
    """The processes that head a tracked command inside the sandbox: bwrap's child (the
    command, pid 1 of its PID namespace, `--as-pid-1`) or, in the sandbox's PID namespace,
    the init of the command's own namespace, which bwrap leaves to that namespace's init
    (`adopter`) and which keeps the command's stdout."""
    pid = proc.pid
    roots = [p for p, ppid, _ in processes(owned) if ppid == pid] if bwrap else []
    return roots + (writing_to(outputs_of(proc), owned, adopter) if adopter is not None else [])


def kill_tree(
    proc: Any, owned: Callable[[int], bool], bwrap: bool, adopter: int | None = None
) -> None:
    """SIGKILL a tracked process and everything below it, leaving no zombie behind.

    Under bwrap the tracked pid is bwrap's outer process and its one child the command, pid 1
    of the PID namespace (`--as-pid-1`): killing that child first takes the namespace down
    (the kernel kills and reaps everything in it), then the outer bwrap reaps it and exits.
    Killing the outer first would orphan its child to the host's pid 1, which may never
    reap it (some container inits do not). Then the process group and the process itself.
    In the sandbox's PID namespace (`adopter`, its init) the command's namespace is headed
    by bwrap's init there, which that init adopted and reaps: killing it takes the command
    down; the outer bwrap is killed at once (it would wait for an exit status forever).
    """
    children = inner_roots(proc, owned, bwrap, adopter)
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    if children and adopter is None and exited(proc, 0.5):
        return
    pid = proc.pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    exited(proc, 5.0)
    if not isinstance(proc, subprocess.Popen):
        with contextlib.suppress(Exception):
            proc.close(force=True)
