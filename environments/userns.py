"""Root inside a sandbox, as a container's: a user namespace of the sandbox's own in which its
commands run as uid 0, with Docker's default capabilities (`Sandbox.own_users`).

Made only when we are root on the host (the sandbox's usual case): host root writes the
namespace's maps, which an unprivileged process may not (it may map its own uid alone).
Inside, uid/gid 0 is the sandbox's own unprivileged uid (`Sandbox.uid`, as before), and
1..65535 a block of 65536 host uids that no host account uses (`BLOCKS`), one block per live
sandbox (a lock file per block); host uid 0 is mapped nowhere, so a file of host root stays
"nobody's" inside and no capability reaches it. The capabilities (`DOCKER_CAPS`) hold in the
namespace alone, which owns none of the host's mounts, network or devices: they let root
inside add users, give files away and drop to another uid, as in a Docker container, and
nothing outside. The namespace cannot make nested ones (its `max_user_namespaces` is 0, and
`CAP_SYS_RESOURCE`, which could raise it, is not given).

The namespace lives as long as the file descriptor `make` returns (its maker exits at once);
each command opens it through `/proc/<our pid>/fd/<fd>` and bwrap joins it (`--userns`). The
sandbox's PID namespace (`Sandbox.share_pids`), made in it, is opened the same way
(`--pidns`), so that bwrap, root of this user namespace, may mount a /proc of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import subprocess
import time
from pathlib import Path
from typing import Literal

__all__ = [
    "BLOCKS",
    "DOCKER_CAPS",
    "PIDNS_FD",
    "SIZE",
    "bwrap_args",
    "claim_block",
    "closer",
    "make",
    "opener",
]

SIZE = 65536
"""Uids (and gids) mapped inside: 0..65535, `nobody` (65534) included."""
BLOCKS = range(0x6000, 0x7000)
"""Block k is host uids k * SIZE .. k * SIZE + 65535: 0x60000000..0x6FFFFFFF, inside the range
systemd leaves to container uids, far above any account's."""
DOCKER_CAPS = ("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID",
               "SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL",
               "AUDIT_WRITE")  # fmt: skip # Docker's default set, as its documentation lists it
FD = 3
"""The descriptor number bwrap gets the namespace on."""
PIDNS_FD = 4
"""The descriptor number bwrap gets the sandbox's PID namespace on (`Sandbox.argv`)."""
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def claim_block(lock_dir: Path) -> tuple[range, int]:
    """(host uids of a free block, its lock fd): no other live sandbox holds it and no process
    runs as one of its uids."""
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    busy = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            busy.add(os.stat(f"/proc/{pid}").st_uid // SIZE)
    start = random.randrange(len(BLOCKS))
    for i in range(len(BLOCKS)):
        k = BLOCKS[(start + i) % len(BLOCKS)]
        if k in busy:
            continue
        fd = os.open(lock_dir / f"block-{k}", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return range(k * SIZE, (k + 1) * SIZE), fd
    raise RuntimeError(f"no free block of sandbox uids in {BLOCKS.start}..{BLOCKS.stop - 1}")


def make(uid: int, block: range) -> int:
    """A new user namespace owned by `uid` (so bwrap, run as `uid`, may join it): inside 0 is
    `uid`, 1..65535 are `block`'s; nested namespaces refused. Returns an O_CLOEXEC fd on it.
    OSError when it cannot be made (not root, user namespaces off)."""
    maker = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
         "unshare", "--user", "--", "sleep", "infinity"],
        env=_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip # arguments grouped by meaning
    try:
        ns, ours = f"/proc/{maker.pid}/ns/user", os.readlink("/proc/self/ns/user")
        deadline = time.monotonic() + 5
        while maker.poll() is None:
            with contextlib.suppress(OSError):
                if os.readlink(ns) != ours:  # unshare has made it and become `sleep`
                    break
            if time.monotonic() > deadline:
                raise OSError("the user namespace was not made in 5 s")
            time.sleep(0.005)
        if maker.poll() is not None:
            raise OSError(f"unshare --user failed (exit {maker.returncode})")
        mapping = f"0 {uid} 1\n1 {block.start + 1} {SIZE - 1}\n"
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{maker.pid}/{name}").write_text(mapping)
        fd = os.open(ns, os.O_RDONLY | os.O_CLOEXEC)
        done = subprocess.run(
            ["nsenter", f"--user={ns}", "--", "sh", "-c",
             "echo 0 > /proc/sys/user/max_user_namespaces"],
            env=_ENV, capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip # arguments grouped by meaning
        if done.returncode != 0:
            os.close(fd)
            raise OSError(f"could not refuse nested user namespaces: {done.stderr.strip()}")
        return fd
    finally:
        maker.kill()
        maker.wait()


def opener(fd: int, number: int = FD) -> list[str]:
    """The command-line prefix that opens our `fd` on a namespace as `number` for bwrap
    (run before the uid is dropped)."""
    return ["sh", "-c", f'exec "$@" {number}<"$0"', f"/proc/{os.getpid()}/fd/{fd}"]


def bwrap_args(share_net: bool, pids: Literal["own", "child", "shared"] = "own") -> list[str]:
    """bwrap's namespace arguments: join the user namespace (as its uid 0), new ones of
    everything else, Docker's capabilities in it. `pids`: a PID namespace of the command's
    own (`own`), one made inside the sandbox's (on `PIDNS_FD`: `child`), or the sandbox's
    itself (`shared`, which sees every process of the sandbox's commands)."""
    args = ["--userns", str(FD), "--unshare-ipc", "--unshare-uts"]
    args += [] if pids == "own" else ["--pidns", str(PIDNS_FD)]
    args += [] if pids == "shared" else ["--unshare-pid"]
    args += ["--unshare-cgroup-try", "--assert-userns-disabled"]
    args += [] if share_net else ["--unshare-net"]
    for cap in DOCKER_CAPS:
        args += ["--cap-add", f"CAP_{cap}"]
    return args


def closer() -> list[str]:
    """Put before the command inside: it does not keep the namespaces' descriptors."""
    return ["sh", "-c", f'exec "$@" {FD}<&- {PIDNS_FD}<&-', "sh"]
